//! A fake Modal API server generated from the same vendored definitions as the client
//! (`crates/exec/proto/modal`): the control plane (`ModalClient`) and a sandbox's command
//! router (`TaskCommandRouter`) on one plaintext HTTP/2 port on 127.0.0.1. It checks the auth
//! metadata the way Modal documents it, records every call, runs execs as real processes,
//! and can slow its output streams down or break them to exercise resumption by offset. RPCs
//! outside the subset answer UNIMPLEMENTED.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

pub mod pb {
    pub mod client {
        include!(concat!(env!("OUT_DIR"), "/modal-server/modal.client.rs"));
    }
    pub mod router {
        include!(concat!(
            env!("OUT_DIR"),
            "/modal-server/modal.task_command_router.rs"
        ));
    }
}
use pb::client as c;
use pb::router as r;

/// The marker every fake exec carries in its environment.
pub const MARKER: &str = "FAKE_MODAL_SANDBOX";

/// How the fake behaves.
#[derive(Clone, Debug)]
pub struct Options {
    /// The token pair the fake accepts.
    pub token_id: String,
    pub token_secret: String,
    /// Accepts this placeholder pair too, as a credential gateway in front of Modal would
    /// (it swaps the placeholders for the real pair).
    pub gateway_placeholders: Option<(String, String)>,
    /// A pause before each output message.
    pub stdio_delay: Option<Duration>,
    /// Each output stream breaks (UNAVAILABLE) after this many messages.
    pub break_streams_after: Option<usize>,
    /// ImageGetOrCreate answers "pending" and the join stream finishes after this many entries.
    pub image_build_entries: usize,
    /// The image build fails.
    pub image_fails: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token_id: "ak-fake".into(),
            token_secret: "as-fake".into(),
            gateway_placeholders: None,
            stdio_delay: None,
            break_streams_after: None,
            image_build_entries: 0,
            image_fails: false,
        }
    }
}

/// One recorded call: the RPC and its metadata.
#[derive(Clone, Debug)]
pub struct Call {
    pub rpc: String,
    pub metadata: HashMap<String, String>,
}

#[derive(Default)]
struct Output {
    data: Vec<u8>,
    closed: bool,
}

struct Exec {
    out: Mutex<Output>,
    err: Mutex<Output>,
    status: Mutex<Option<r::task_exec_wait_response::ExitStatus>>,
    changed: Notify,
}

/// A fake sandbox.
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub definition: c::Sandbox,
    pub task_id: String,
    pub terminated: bool,
}

/// What the fake knows.
#[derive(Default)]
pub struct State {
    pub calls: Mutex<Vec<Call>>,
    pub sandboxes: Mutex<HashMap<String, Sandbox>>,
    pub exec_requests: Mutex<Vec<r::TaskExecStartRequest>>,
    execs: Mutex<HashMap<String, Arc<Exec>>>,
    tokens: Mutex<HashSet<String>>,
    jwts: Mutex<HashMap<String, String>>,
    next: AtomicU64,
}

#[derive(Clone)]
struct Svc {
    opts: Options,
    state: Arc<State>,
    url: String,
}

fn metadata_map<T>(req: &Request<T>) -> HashMap<String, String> {
    req.metadata()
        .iter()
        .filter_map(|kv| match kv {
            tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                Some((k.to_string(), v.to_str().unwrap_or_default().to_string()))
            }
            _ => None,
        })
        .collect()
}

impl Svc {
    fn id(&self, prefix: &str) -> String {
        // Unique across fakes: parallel tests must never end each other's processes.
        let n = self.state.next.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{n}x{}", nestbox_exec::job::random_token(6))
    }

    fn record<T>(&self, rpc: &str, req: &Request<T>) -> HashMap<String, String> {
        let md = metadata_map(req);
        self.state.calls.lock().unwrap().push(Call {
            rpc: rpc.into(),
            metadata: md.clone(),
        });
        md
    }

    /// Control-plane calls other than AuthTokenGet need a token it issued.
    fn authed<T>(&self, rpc: &str, req: &Request<T>) -> Result<(), Status> {
        let md = self.record(rpc, req);
        for k in ["x-modal-client-type", "x-modal-client-version"] {
            if !md.contains_key(k) {
                return Err(Status::invalid_argument(format!("missing {k}")));
            }
        }
        let token = md.get("x-modal-auth-token").cloned().unwrap_or_default();
        if self.state.tokens.lock().unwrap().contains(&token) {
            Ok(())
        } else {
            Err(Status::unauthenticated(
                "missing or unknown x-modal-auth-token",
            ))
        }
    }

    fn router_authed<T>(&self, rpc: &str, req: &Request<T>, task: &str) -> Result<(), Status> {
        let md = self.record(rpc, req);
        let want = self.state.jwts.lock().unwrap().get(task).cloned();
        match (md.get("authorization"), want) {
            (Some(got), Some(jwt)) if *got == format!("Bearer {jwt}") => Ok(()),
            _ => Err(Status::unauthenticated("bad router bearer token")),
        }
    }

    fn exec(&self, task: &str, exec_id: &str) -> Result<Arc<Exec>, Status> {
        self.state
            .execs
            .lock()
            .unwrap()
            .get(&format!("{task}/{exec_id}"))
            .cloned()
            .ok_or_else(|| Status::not_found("no such exec"))
    }

    fn sandbox_of_task(&self, task: &str) -> Option<(String, Sandbox)> {
        self.state
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|(_, s)| s.task_id == task)
            .map(|(k, v)| (k.clone(), v.clone()))
    }
}

#[tonic::async_trait]
impl c::modal_client_server::ModalClient for Svc {
    async fn auth_token_get(
        &self,
        req: Request<c::AuthTokenGetRequest>,
    ) -> Result<Response<c::AuthTokenGetResponse>, Status> {
        let md = self.record("AuthTokenGet", &req);
        let pair = (
            md.get("x-modal-token-id").cloned().unwrap_or_default(),
            md.get("x-modal-token-secret").cloned().unwrap_or_default(),
        );
        let real = (self.opts.token_id.clone(), self.opts.token_secret.clone());
        let ok = pair == real || self.opts.gateway_placeholders.as_ref() == Some(&pair);
        if !ok {
            return Err(Status::unauthenticated("Token ID is malformed or invalid"));
        }
        let token = self.id("auth");
        self.state.tokens.lock().unwrap().insert(token.clone());
        Ok(Response::new(c::AuthTokenGetResponse { token }))
    }

    async fn app_get_or_create(
        &self,
        req: Request<c::AppGetOrCreateRequest>,
    ) -> Result<Response<c::AppGetOrCreateResponse>, Status> {
        self.authed("AppGetOrCreate", &req)?;
        Ok(Response::new(c::AppGetOrCreateResponse {
            app_id: format!("ap-{}", req.get_ref().app_name),
        }))
    }

    async fn image_get_or_create(
        &self,
        req: Request<c::ImageGetOrCreateRequest>,
    ) -> Result<Response<c::ImageGetOrCreateResponse>, Status> {
        self.authed("ImageGetOrCreate", &req)?;
        let result = (self.opts.image_build_entries == 0).then(|| self.image_result());
        Ok(Response::new(c::ImageGetOrCreateResponse {
            image_id: self.id("im"),
            result,
        }))
    }

    type ImageJoinStreamingStream =
        tokio_stream::wrappers::ReceiverStream<Result<c::ImageJoinStreamingResponse, Status>>;

    async fn image_join_streaming(
        &self,
        req: Request<c::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        self.authed("ImageJoinStreaming", &req)?;
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let n = self.opts.image_build_entries;
        let result = self.image_result();
        tokio::spawn(async move {
            for i in 0..n {
                let _ = tx
                    .send(Ok(c::ImageJoinStreamingResponse {
                        result: None,
                        entry_id: format!("e{i}"),
                        eof: false,
                    }))
                    .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = tx
                .send(Ok(c::ImageJoinStreamingResponse {
                    result: Some(result),
                    entry_id: "end".into(),
                    eof: true,
                }))
                .await;
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    async fn sandbox_create(
        &self,
        req: Request<c::SandboxCreateRequest>,
    ) -> Result<Response<c::SandboxCreateResponse>, Status> {
        self.authed("SandboxCreate", &req)?;
        let definition = req.into_inner().definition.unwrap_or_default();
        let id = self.id("sb");
        let task_id = self.id("ta");
        self.state.sandboxes.lock().unwrap().insert(
            id.clone(),
            Sandbox {
                definition,
                task_id,
                terminated: false,
            },
        );
        Ok(Response::new(c::SandboxCreateResponse { sandbox_id: id }))
    }

    async fn sandbox_get_task_id(
        &self,
        req: Request<c::SandboxGetTaskIdRequest>,
    ) -> Result<Response<c::SandboxGetTaskIdResponse>, Status> {
        self.authed("SandboxGetTaskId", &req)?;
        let sb = self
            .state
            .sandboxes
            .lock()
            .unwrap()
            .get(&req.get_ref().sandbox_id)
            .cloned()
            .ok_or_else(|| Status::not_found("no such sandbox"))?;
        Ok(Response::new(if sb.terminated {
            c::SandboxGetTaskIdResponse {
                task_id: None,
                task_result: Some(c::GenericResult {
                    status: 3,
                    exception: "terminated".into(),
                    exitcode: 0,
                }),
            }
        } else {
            c::SandboxGetTaskIdResponse {
                task_id: Some(sb.task_id),
                task_result: None,
            }
        }))
    }

    async fn task_get_command_router_access(
        &self,
        req: Request<c::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<c::TaskGetCommandRouterAccessResponse>, Status> {
        self.authed("TaskGetCommandRouterAccess", &req)?;
        let jwt = self.id("jwt");
        self.state
            .jwts
            .lock()
            .unwrap()
            .insert(req.get_ref().task_id.clone(), jwt.clone());
        Ok(Response::new(c::TaskGetCommandRouterAccessResponse {
            jwt,
            url: self.url.clone(),
        }))
    }

    async fn sandbox_terminate(
        &self,
        req: Request<c::SandboxTerminateRequest>,
    ) -> Result<Response<c::SandboxTerminateResponse>, Status> {
        self.authed("SandboxTerminate", &req)?;
        let id = req.get_ref().sandbox_id.clone();
        if let Some(sb) = self.state.sandboxes.lock().unwrap().get_mut(&id) {
            sb.terminated = true;
        }
        super::kill_marked(MARKER, &id);
        Ok(Response::new(c::SandboxTerminateResponse {
            existing_result: None,
        }))
    }

    async fn sandbox_wait(
        &self,
        req: Request<c::SandboxWaitRequest>,
    ) -> Result<Response<c::SandboxWaitResponse>, Status> {
        self.authed("SandboxWait", &req)?;
        Err(Status::unimplemented(
            "the fake does not wait for sandboxes",
        ))
    }
}

impl Svc {
    fn image_result(&self) -> c::GenericResult {
        if self.opts.image_fails {
            c::GenericResult {
                status: 2,
                exception: "Image build for im-x failed".into(),
                exitcode: 1,
            }
        } else {
            c::GenericResult {
                status: 1,
                exception: String::new(),
                exitcode: 0,
            }
        }
    }
}

async fn drain(mut from: impl tokio::io::AsyncRead + Unpin, exec: Arc<Exec>, stderr: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        {
            let mut o = if stderr {
                exec.err.lock().unwrap()
            } else {
                exec.out.lock().unwrap()
            };
            if n == 0 {
                o.closed = true;
            } else {
                o.data.extend_from_slice(&buf[..n]);
            }
        }
        exec.changed.notify_waiters();
        if n == 0 {
            return;
        }
    }
}

#[tonic::async_trait]
impl r::task_command_router_server::TaskCommandRouter for Svc {
    async fn task_exec_start(
        &self,
        req: Request<r::TaskExecStartRequest>,
    ) -> Result<Response<r::TaskExecStartResponse>, Status> {
        let task = req.get_ref().task_id.clone();
        self.router_authed("TaskExecStart", &req, &task)?;
        let (sandbox_id, sb) = self
            .sandbox_of_task(&task)
            .ok_or_else(|| Status::not_found("no such task"))?;
        if sb.terminated {
            return Err(Status::failed_precondition("the sandbox has terminated"));
        }
        let start = req.into_inner();
        self.state.exec_requests.lock().unwrap().push(start.clone());
        let Some(program) = start.command_args.first() else {
            return Err(Status::invalid_argument("empty command"));
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&start.command_args[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/tmp")
            .env(MARKER, &sandbox_id)
            .envs(&start.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(w) = &start.workdir {
            cmd.current_dir(w);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Status::internal(format!("exec failed: {e}")))?;
        let exec = Arc::new(Exec {
            out: Mutex::default(),
            err: Mutex::default(),
            status: Mutex::new(None),
            changed: Notify::new(),
        });
        self.state
            .execs
            .lock()
            .unwrap()
            .insert(format!("{task}/{}", start.exec_id), exec.clone());
        tokio::spawn(drain(child.stdout.take().unwrap(), exec.clone(), false));
        tokio::spawn(drain(child.stderr.take().unwrap(), exec.clone(), true));
        tokio::spawn(async move {
            use r::task_exec_wait_response::ExitStatus;
            use std::os::unix::process::ExitStatusExt;
            let st = child.wait().await.unwrap();
            *exec.status.lock().unwrap() = Some(match st.code() {
                Some(c) => ExitStatus::Code(c),
                None => ExitStatus::Signal(st.signal().unwrap_or(9)),
            });
            exec.changed.notify_waiters();
        });
        Ok(Response::new(r::TaskExecStartResponse {}))
    }

    type TaskExecStdioReadStream =
        tokio_stream::wrappers::ReceiverStream<Result<r::TaskExecStdioReadResponse, Status>>;

    async fn task_exec_stdio_read(
        &self,
        req: Request<r::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        let task = req.get_ref().task_id.clone();
        self.router_authed("TaskExecStdioRead", &req, &task)?;
        let rq = req.into_inner();
        let exec = self.exec(&task, &rq.exec_id)?;
        let stderr = rq.file_descriptor == 1;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let delay = self.opts.stdio_delay;
        let break_after = self.opts.break_streams_after;
        tokio::spawn(async move {
            let mut pos = rq.offset as usize;
            let mut sent = 0usize;
            loop {
                let notified = exec.changed.notified();
                let (chunk, done) = {
                    let o = if stderr {
                        exec.err.lock().unwrap()
                    } else {
                        exec.out.lock().unwrap()
                    };
                    let end = o.data.len().min(pos + 4096);
                    (
                        o.data[pos.min(end)..end].to_vec(),
                        o.closed && end == o.data.len(),
                    )
                };
                if !chunk.is_empty() {
                    if break_after.is_some_and(|n| sent >= n) {
                        let _ = tx
                            .send(Err(Status::unavailable("fake: stream broken")))
                            .await;
                        return;
                    }
                    if let Some(d) = delay {
                        tokio::time::sleep(d).await;
                    }
                    pos += chunk.len();
                    sent += 1;
                    if tx
                        .send(Ok(r::TaskExecStdioReadResponse { data: chunk }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                if done {
                    return;
                }
                let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    async fn task_exec_wait(
        &self,
        req: Request<r::TaskExecWaitRequest>,
    ) -> Result<Response<r::TaskExecWaitResponse>, Status> {
        let task = req.get_ref().task_id.clone();
        self.router_authed("TaskExecWait", &req, &task)?;
        let exec = self.exec(&task, &req.get_ref().exec_id)?;
        loop {
            let notified = exec.changed.notified();
            if let Some(s) = *exec.status.lock().unwrap() {
                return Ok(Response::new(r::TaskExecWaitResponse {
                    exit_status: Some(s),
                }));
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }
}

/// A running fake; stops (and kills what its sandboxes still run) when dropped.
pub struct FakeModal {
    pub url: String,
    pub state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeModal {
    /// Starts a fake on a free port of 127.0.0.1.
    pub async fn start(opts: Options) -> FakeModal {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State::default());
        let svc = Svc {
            opts,
            state: state.clone(),
            url: url.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(c::modal_client_server::ModalClientServer::new(svc.clone()))
                .add_service(r::task_command_router_server::TaskCommandRouterServer::new(
                    svc,
                ))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                }),
        );
        FakeModal {
            url,
            state,
            stop: Some(tx),
        }
    }

    /// The RPC names called so far, in order.
    pub fn rpcs(&self) -> Vec<String> {
        self.state
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.rpc.clone())
            .collect()
    }
}

impl Drop for FakeModal {
    fn drop(&mut self) {
        for id in self.state.sandboxes.lock().unwrap().keys() {
            super::kill_marked(MARKER, id);
        }
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
