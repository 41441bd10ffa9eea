//! Modal's two gRPC endpoints: the control plane (`ModalClient`: apps, images, sandboxes, the
//! short-lived auth token) and a sandbox's command router (`TaskCommandRouter`: exec, output
//! by offset, exit status). Metadata follows Modal's clients: the token pair and client
//! identification on every control-plane call, the auth token from `AuthTokenGet` on every
//! other one, `authorization: Bearer <jwt>` on the router.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::credentials::{Resolved, check_url};
use super::proto::client as pb;
use super::proto::client::modal_client_client::ModalClientClient;
use super::proto::router as rpb;
use super::proto::router::task_command_router_client::TaskCommandRouterClient;
use crate::backend::BackendKind;
use crate::error::{ExecError, Result};

/// `x-modal-client-type`: CLIENT_TYPE_LIBMODAL (7), the generic non-Python client.
const CLIENT_TYPE: &str = "7";
/// `x-modal-client-version`: the Python client version whose behaviour we follow (what
/// modal-go sends too); the server gates features on it.
const CLIENT_VERSION: &str = "1.0.0";
/// Largest message accepted (modal-go's cap).
const MAX_MESSAGE: usize = 100 << 20;

/// A gRPC status as a typed error.
pub(crate) fn status_error(action: &str, s: tonic::Status) -> ExecError {
    let message = if s.message().is_empty() {
        format!("{:?}", s.code())
    } else {
        format!("{:?}: {}", s.code(), s.message())
    };
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            ExecError::Connection {
                backend: BackendKind::Modal,
                action: action.into(),
                message,
            }
        }
        _ => ExecError::Engine {
            backend: BackendKind::Modal,
            action: action.into(),
            message,
        },
    }
}

async fn channel(url: &str, ca: Option<&std::path::Path>, connect: Duration) -> Result<Channel> {
    check_url(url)?;
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| ExecError::InvalidConfig {
            backend: BackendKind::Modal,
            reason: format!("{url}: {e}"),
        })?
        .connect_timeout(connect)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if url.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(ca) = ca {
            let pem = std::fs::read(ca)
                .map_err(|e| ExecError::io(format!("reading {}", ca.display()), e))?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| ExecError::InvalidConfig {
                backend: BackendKind::Modal,
                reason: format!("TLS for {url}: {e}"),
            })?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| ExecError::Unavailable {
            backend: BackendKind::Modal,
            reason: format!("cannot connect to {url}: {e}"),
            hint: None,
        })
}

/// The control plane, authenticated.
#[derive(Clone)]
pub(crate) struct ControlPlane {
    client: ModalClientClient<Channel>,
    creds: Resolved,
    auth_token: String,
}

impl ControlPlane {
    /// Connects and fetches the auth token: a failure here means the credentials (or the
    /// gateway holding them) are not usable, and nothing else is tried.
    pub async fn connect(creds: &Resolved, connect_timeout: Duration) -> Result<ControlPlane> {
        let ch = channel(&creds.server_url, creds.ca_file.as_deref(), connect_timeout).await?;
        let client = ModalClientClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let mut me = ControlPlane {
            client,
            creds: creds.clone(),
            auth_token: String::new(),
        };
        let token = me
            .client
            .clone()
            .auth_token_get(me.request(pb::AuthTokenGetRequest {}, false))
            .await
            .map_err(|s| ExecError::Unavailable {
                backend: BackendKind::Modal,
                reason: format!(
                    "{} refused the credentials from {}: {:?}: {}",
                    creds.server_url,
                    creds.source,
                    s.code(),
                    s.message()
                ),
                hint: Some(match creds.mode {
                    super::credentials::Mode::Direct => "check the token pair (`modal token new` makes a new one)".into(),
                    super::credentials::Mode::Managed => "check that the gateway is running and holds the Modal token pair; managed credentials never fall back to your own".into(),
                }),
            })?
            .into_inner()
            .token;
        me.auth_token = token;
        Ok(me)
    }

    fn request<T>(&self, msg: T, with_token: bool) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        let md = r.metadata_mut();
        let mut put = |k: &'static str, v: &str| {
            if let Ok(v) = MetadataValue::try_from(v) {
                md.insert(k, v);
            }
        };
        put("x-modal-token-id", &self.creds.token_id);
        put("x-modal-token-secret", &self.creds.token_secret);
        put("x-modal-client-type", CLIENT_TYPE);
        put("x-modal-client-version", CLIENT_VERSION);
        put(
            "x-modal-libmodal-version",
            concat!("nestbox/", env!("CARGO_PKG_VERSION")),
        );
        if with_token {
            put("x-modal-auth-token", &self.auth_token);
        }
        r
    }

    fn environment(&self) -> String {
        self.creds.environment.clone().unwrap_or_default()
    }

    /// The app's id, created when missing.
    pub async fn app(&self, name: &str) -> Result<String> {
        let req = pb::AppGetOrCreateRequest {
            app_name: name.into(),
            environment_name: self.environment(),
            object_creation_type: pb::ObjectCreationType::CreateIfMissing as i32,
        };
        Ok(self
            .client
            .clone()
            .app_get_or_create(self.request(req, true))
            .await
            .map_err(|s| status_error(&format!("find or create the app {name}"), s))?
            .into_inner()
            .app_id)
    }

    /// The image's id: built by Modal from `FROM <reference>`, waited for when it is new.
    pub async fn image(&self, app_id: &str, reference: &str, limit: Duration) -> Result<String> {
        let req = pb::ImageGetOrCreateRequest {
            image: Some(pb::Image {
                dockerfile_commands: vec![format!("FROM {reference}")],
            }),
            app_id: app_id.into(),
            builder_version: String::new(),
        };
        let action = format!("build the image {reference}");
        let resp = self
            .client
            .clone()
            .image_get_or_create(self.request(req, true))
            .await
            .map_err(|s| status_error(&action, s))?
            .into_inner();
        let mut result = resp.result.filter(|r| r.status != 0);
        let start = std::time::Instant::now();
        let mut last_entry = String::new();
        while result.is_none() {
            if start.elapsed() > limit {
                return Err(ExecError::Engine {
                    backend: BackendKind::Modal,
                    action,
                    message: format!("not built after {} s", limit.as_secs()),
                });
            }
            let join = pb::ImageJoinStreamingRequest {
                image_id: resp.image_id.clone(),
                timeout: 55.0,
                last_entry_id: last_entry.clone(),
            };
            let mut stream = self
                .client
                .clone()
                .image_join_streaming(self.request(join, true))
                .await
                .map_err(|s| status_error(&action, s))?
                .into_inner();
            while let Some(item) = stream
                .message()
                .await
                .map_err(|s| status_error(&action, s))?
            {
                if !item.entry_id.is_empty() {
                    last_entry = item.entry_id.clone();
                }
                if let Some(r) = item.result.filter(|r| r.status != 0) {
                    result = Some(r);
                    break;
                }
                if item.eof {
                    break;
                }
            }
        }
        let r = result.expect("loop ends with a result");
        if r.status == pb::generic_result::GenericStatus::Success as i32 {
            Ok(resp.image_id)
        } else {
            Err(ExecError::Engine {
                backend: BackendKind::Modal,
                action,
                message: format!("status {}: {}", r.status, r.exception),
            })
        }
    }

    /// Creates a sandbox; returns its id.
    pub async fn create_sandbox(&self, app_id: &str, definition: pb::Sandbox) -> Result<String> {
        let req = pb::SandboxCreateRequest {
            app_id: app_id.into(),
            definition: Some(definition),
            environment_name: self.environment(),
        };
        Ok(self
            .client
            .clone()
            .sandbox_create(self.request(req, true))
            .await
            .map_err(|s| status_error("create a sandbox", s))?
            .into_inner()
            .sandbox_id)
    }

    /// The sandbox's task, once it runs.
    pub async fn task_id(&self, sandbox_id: &str, limit: Duration) -> Result<String> {
        let start = std::time::Instant::now();
        let action = format!("wait for sandbox {sandbox_id} to start");
        loop {
            let req = pb::SandboxGetTaskIdRequest {
                sandbox_id: sandbox_id.into(),
                timeout: Some(10.0),
                wait_until_ready: true,
            };
            let resp = self
                .client
                .clone()
                .sandbox_get_task_id(self.request(req, true))
                .await
                .map_err(|s| status_error(&action, s))?
                .into_inner();
            if let Some(r) = resp.task_result {
                return Err(ExecError::Engine {
                    backend: BackendKind::Modal,
                    action,
                    message: format!(
                        "the sandbox has ended (status {}: {})",
                        r.status, r.exception
                    ),
                });
            }
            if let Some(t) = resp.task_id.filter(|t| !t.is_empty()) {
                return Ok(t);
            }
            if start.elapsed() > limit {
                return Err(ExecError::Engine {
                    backend: BackendKind::Modal,
                    action,
                    message: format!("not running after {} s", limit.as_secs()),
                });
            }
        }
    }

    /// A connection to the sandbox task's command router.
    pub async fn router(&self, task_id: &str, connect: Duration) -> Result<Router> {
        let req = pb::TaskGetCommandRouterAccessRequest {
            task_id: task_id.into(),
        };
        let access = self
            .client
            .clone()
            .task_get_command_router_access(self.request(req, true))
            .await
            .map_err(|s| status_error("reach the sandbox's command router", s))?
            .into_inner();
        let ch = channel(&access.url, None, connect).await?;
        Ok(Router {
            client: TaskCommandRouterClient::new(ch)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            jwt: access.jwt,
            task_id: task_id.into(),
        })
    }

    /// Terminates the sandbox: everything in it ends.
    pub async fn terminate(&self, sandbox_id: &str) -> Result<()> {
        let req = pb::SandboxTerminateRequest {
            sandbox_id: sandbox_id.into(),
        };
        self.client
            .clone()
            .sandbox_terminate(self.request(req, true))
            .await
            .map_err(|s| status_error(&format!("terminate sandbox {sandbox_id}"), s))?;
        Ok(())
    }
}

/// One sandbox task's command router.
#[derive(Clone)]
pub(crate) struct Router {
    client: TaskCommandRouterClient<Channel>,
    jwt: String,
    pub task_id: String,
}

/// How an exec ended: its exit code, or the signal that ended it.
pub(crate) fn exit_code(resp: &rpb::TaskExecWaitResponse) -> Option<i32> {
    use rpb::task_exec_wait_response::ExitStatus;
    match resp.exit_status? {
        ExitStatus::Code(c) => Some(c),
        ExitStatus::Signal(s) => Some(128 + s),
    }
}

impl Router {
    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Ok(v) = MetadataValue::try_from(format!("Bearer {}", self.jwt)) {
            r.metadata_mut().insert("authorization", v);
        }
        r
    }

    /// Starts `argv` with both streams piped; `env` is sent in the request, never on a
    /// command line.
    pub async fn start(
        &self,
        exec_id: &str,
        argv: Vec<String>,
        env: std::collections::HashMap<String, String>,
        timeout_secs: Option<u32>,
    ) -> Result<()> {
        let req = rpb::TaskExecStartRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
            command_args: argv,
            stdout_config: rpb::TaskExecStdoutConfig::Pipe as i32,
            stderr_config: rpb::TaskExecStderrConfig::Pipe as i32,
            timeout_secs,
            workdir: None,
            env,
        };
        self.client
            .clone()
            .task_exec_start(self.request(req))
            .await
            .map_err(|s| status_error("start a command in the sandbox", s))?;
        Ok(())
    }

    /// A stream of one of the exec's outputs, from byte `offset`.
    pub async fn read(
        &self,
        exec_id: &str,
        stderr: bool,
        offset: u64,
    ) -> std::result::Result<tonic::Streaming<rpb::TaskExecStdioReadResponse>, tonic::Status> {
        let fd = if stderr {
            rpb::TaskExecStdioFileDescriptor::Stderr
        } else {
            rpb::TaskExecStdioFileDescriptor::Stdout
        };
        let req = rpb::TaskExecStdioReadRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
            offset,
            file_descriptor: fd as i32,
        };
        Ok(self
            .client
            .clone()
            .task_exec_stdio_read(self.request(req))
            .await?
            .into_inner())
    }

    /// Waits for the exec to end.
    pub async fn wait(&self, exec_id: &str) -> std::result::Result<Option<i32>, tonic::Status> {
        let req = rpb::TaskExecWaitRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.into(),
        };
        let resp = self
            .client
            .clone()
            .task_exec_wait(self.request(req))
            .await?;
        Ok(exit_code(resp.get_ref()))
    }
}
