//! The Daytona backend: commands run in a Daytona sandbox, over Daytona's REST API.
//!
//! - **Key**: `api_key_file` when configured (explicit configuration wins), else
//!   `DAYTONA_API_KEY`; checked in [`prepare`](Backend::prepare) with one cheap call. None, or a
//!   refused one, is an error that says where the key came from; nothing runs elsewhere.
//! - **The sandbox**: created on first use with the configured snapshot, CPU, memory and disk
//!   (whole GiB, Daytona's unit), network block and auto-stop; with a `name`, an existing
//!   sandbox of that name is resumed instead (started when stopped or archived). nestbox waits
//!   until its state is `started`.
//! - **Commands** run under the job [supervisor](crate::supervisor), driven through a toolbox
//!   process session (each supervisor call is one session command, whose standard output and
//!   error the API returns apart). The command's own output goes to job files inside the
//!   sandbox, read by offset: standard output and error stay separate whatever the daemon's
//!   version, and a dropped connection loses nothing. Timeouts and kills are carried out by the
//!   supervisor inside the sandbox, on the whole tree; if a foreground command has not ended
//!   well after its timeout, the sandbox is stopped.
//! - **Environment**: the values travel in the request body of the session command that starts
//!   the job (the daemon hands it to the session's shell), never on a local command line.
//! - [`close`](Backend::close): delete (anonymous sandbox) or stop (named sandbox), or keep;
//!   a sandbox that runs background jobs is kept. Job ids are `<sandbox id>.<token>`.
//!
//! **Not exercised against the live service**: Daytona cannot be reached from the machines
//! this project is built on. The tests run against a local fake that follows Daytona's
//! published API shapes (the generated clients' models); the service's own behaviour is not
//! verified.

mod client;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, CommandSpec, Descriptor, JobId, JobStatus, OutputChunk,
    RunResult, Stream,
};
use crate::config::{DaytonaConfig, DaytonaOnClose};
use crate::error::{ExecError, Result};
use crate::job::{CallOutput, Jobs, Transport, random_token};
use crate::output::Capture;
use crate::supervisor;
use client::Api;

const DEFAULT_API: &str = "https://app.daytona.io/api";
const GRACE_SECS: u64 = 2;
const BACKSTOP: Duration = Duration::from_secs(15);

/// A sandbox's toolbox and this backend's session in it.
#[derive(Clone)]
struct Place {
    sandbox_id: String,
    toolbox: String,
    session: String,
}

/// A backend that runs commands in a Daytona sandbox.
pub struct DaytonaBackend {
    config: DaytonaConfig,
    ctx: Context,
    api: Api,
    own: tokio::sync::Mutex<Option<Place>>,
    spawned: AtomicBool,
    descriptor: Descriptor,
}

/// The supervisor's verbs as session commands: the program runs in a subshell of the session's
/// shell, so its `exit` does not end the session.
struct SessionTransport<'a> {
    api: &'a Api,
    place: &'a Place,
}

impl Transport for SessionTransport<'_> {
    fn call<'a>(
        &'a self,
        verb: &'a str,
        args: Vec<String>,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<CallOutput>> {
        Box::pin(async move {
            let program = format!("(\n{})", supervisor::stdin_program(verb, &args, env));
            let r = self
                .api
                .session_exec(&self.place.toolbox, &self.place.session, &program)
                .await?;
            Ok(CallOutput {
                stdout: r.stdout.or(r.output).unwrap_or_default().into_bytes(),
                stderr: r.stderr.unwrap_or_default().into_bytes(),
                code: r.exit_code,
            })
        })
    }
}

fn gib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 30).max(1)
}

impl DaytonaBackend {
    /// Builds the backend: finds the API and the key (the API is asked in
    /// [`prepare`](Backend::prepare)).
    pub(crate) fn new(config: &DaytonaConfig, ctx: Context) -> Result<Self> {
        let env = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let base = config
            .api_url
            .clone()
            .or_else(|| env("DAYTONA_API_URL"))
            .or_else(|| env("DAYTONA_SERVER_URL"))
            .unwrap_or_else(|| DEFAULT_API.into());
        crate::modal::credentials::check_url(&base).map_err(|_| ExecError::InvalidConfig {
            backend: BackendKind::Daytona,
            reason: format!("{base}: use https:// (plaintext http:// only on loopback)"),
        })?;
        let (key, source) = match &config.api_key_file {
            Some(path) => {
                let key = std::fs::read_to_string(path)
                    .map_err(|e| ExecError::Unavailable {
                        backend: BackendKind::Daytona,
                        reason: format!("cannot read the API key file {}: {e}", path.display()),
                        hint: None,
                    })?
                    .trim()
                    .to_string();
                (key, format!("the key file {}", path.display()))
            }
            None => match env("DAYTONA_API_KEY") {
                Some(k) => (k, "DAYTONA_API_KEY".to_string()),
                None => {
                    return Err(ExecError::Unavailable {
                        backend: BackendKind::Daytona,
                        reason: "no API key (checked: api_key_file not configured; DAYTONA_API_KEY not set)".into(),
                        hint: Some("create a key in the Daytona dashboard and set DAYTONA_API_KEY, or api_key_file".into()),
                    });
                }
            },
        };
        if key.is_empty() {
            return Err(ExecError::Unavailable {
                backend: BackendKind::Daytona,
                reason: format!("the API key from {source} is empty"),
                hint: None,
            });
        }
        let api = Api::new(&base, key, source.clone(), config.request_timeout)?;
        let descriptor = Descriptor::remote_sandbox(
            BackendKind::Daytona,
            "Daytona",
            config.network_block_all,
            format!(
                "Daytona sandbox {}at {base}, key from {source}",
                config
                    .name
                    .as_ref()
                    .map(|n| format!("{n} "))
                    .unwrap_or_default()
            ),
        );
        Ok(DaytonaBackend {
            config: config.clone(),
            ctx,
            api,
            own: tokio::sync::Mutex::new(None),
            spawned: AtomicBool::new(false),
            descriptor,
        })
    }

    fn create_body(&self) -> Value {
        let c = &self.config;
        let mut body = json!({
            "networkBlockAll": c.network_block_all,
            "labels": { "nestbox": "1" },
        });
        let o = body.as_object_mut().expect("an object");
        let mut put = |k: &str, v: Value| {
            o.insert(k.into(), v);
        };
        if let Some(n) = &c.name {
            put("name", json!(n));
        }
        if let Some(s) = &c.snapshot {
            put("snapshot", json!(s));
        }
        let target = c
            .target
            .clone()
            .or_else(|| std::env::var("DAYTONA_TARGET").ok());
        if let Some(t) = target {
            put("target", json!(t));
        }
        if let Some(cpu) = c.cpu {
            put("cpu", json!(cpu));
        }
        if let Some(m) = c.memory {
            put("memory", json!(gib(m)));
        }
        if let Some(d) = c.disk {
            put("disk", json!(gib(d)));
        }
        if let Some(a) = c.auto_stop_minutes {
            put("autoStopInterval", json!(a));
        }
        body
    }

    async fn open_place(&self, sb: client::Sandbox) -> Result<Place> {
        let toolbox = self.api.toolbox(&sb).await?;
        let session = format!("nestbox-{}", random_token(6));
        self.api.create_session(&toolbox, &session).await?;
        Ok(Place {
            sandbox_id: sb.id,
            toolbox,
            session,
        })
    }

    /// This backend's sandbox: resumed by name, or created; started.
    async fn own(&self) -> Result<Place> {
        let mut own = self.own.lock().await;
        if let Some(p) = own.as_ref() {
            return Ok(p.clone());
        }
        let existing = match &self.config.name {
            Some(n) => self.api.find(n).await?,
            None => None,
        };
        let sb = match existing {
            Some(sb) => {
                if matches!(sb.state.as_str(), "stopped" | "archived" | "stopping") {
                    self.api.lifecycle(&sb.id, "start").await?;
                }
                sb
            }
            None => self.api.create(self.create_body()).await?,
        };
        let sb = self
            .api
            .wait_started(&sb.id, self.config.start_timeout)
            .await?;
        let place = self.open_place(sb).await?;
        *own = Some(place.clone());
        Ok(place)
    }

    async fn place_for(&self, sandbox_id: &str) -> Result<Place> {
        if let Some(p) = self.own.lock().await.as_ref()
            && p.sandbox_id == sandbox_id
        {
            return Ok(p.clone());
        }
        let sb = self
            .api
            .find(sandbox_id)
            .await?
            .ok_or_else(|| ExecError::NoSuchJob {
                backend: BackendKind::Daytona,
                id: sandbox_id.into(),
                detail: Some("its sandbox no longer exists".into()),
            })?;
        if sb.state != "started" {
            return Err(ExecError::Refused {
                backend: BackendKind::Daytona,
                message: format!(
                    "sandbox {sandbox_id} is {}: its jobs are not reachable",
                    sb.state
                ),
            });
        }
        self.open_place(sb).await
    }

    fn jobs_dir(&self) -> String {
        self.config
            .jobs_dir
            .clone()
            .unwrap_or_else(|| "/tmp/nestbox-jobs".into())
    }

    fn parse_job(&self, job: &JobId) -> Result<(String, String)> {
        match job.as_str().rsplit_once('.') {
            Some((sb, token)) if !sb.is_empty() && !token.is_empty() => {
                Ok((sb.to_string(), format!("{}/{token}", self.jobs_dir())))
            }
            _ => Err(ExecError::InvalidRequest(format!(
                "`{job}` is not a Daytona job id of nestbox (<sandbox id>.<token>)"
            ))),
        }
    }

    fn jobs<'t>(t: &'t SessionTransport<'_>) -> Jobs<'t> {
        Jobs {
            transport: t,
            kind: BackendKind::Daytona,
            grace_secs: GRACE_SECS,
        }
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        cmd.validate()?;
        let started_at = SystemTime::now();
        let clock = Instant::now();
        let place = self.own().await?;
        let t = SessionTransport {
            api: &self.api,
            place: &place,
        };
        let jobs = Self::jobs(&t);
        let id = JobId::parse(&format!("{}.{}", place.sandbox_id, random_token(8)))?;
        let (_, dir) = self.parse_job(&id)?;
        let mut spec = cmd.clone();
        if spec.workdir.is_none() {
            spec.workdir = self.config.workdir.clone();
        }
        jobs.spawn(&dir, &spec, &spec.argv).await?;
        let spill = self.ctx.spill_dir();
        let mut out = Capture::new(&self.ctx.output, &spill, "daytona-stdout");
        let mut err = Capture::new(&self.ctx.output, &spill, "daytona-stderr");
        let backstop = cmd
            .timeout
            .map(|t| clock + t + Duration::from_secs(GRACE_SECS) + BACKSTOP);
        let status = loop {
            let status = jobs.wait(&id, &dir, Some(Duration::from_secs(1))).await?;
            for (stream, capture) in [(Stream::Stdout, &mut out), (Stream::Stderr, &mut err)] {
                loop {
                    let c = jobs
                        .read(&id, &dir, stream, capture.total(), 1 << 20)
                        .await?;
                    if c.data.is_empty() {
                        break;
                    }
                    capture.push(&c.data)?;
                }
            }
            if status.is_done() {
                break status;
            }
            if backstop.is_some_and(|b| Instant::now() >= b) {
                self.api.lifecycle(&place.sandbox_id, "stop").await?;
                self.own.lock().await.take();
                return Ok(RunResult {
                    exit_code: None,
                    stdout: out.finish(),
                    stderr: err.finish(),
                    started_at,
                    duration: clock.elapsed(),
                    timed_out: true,
                    backend: BackendKind::Daytona,
                });
            }
        };
        let _ = jobs.forget(&id, &dir).await;
        let (code, timed_out) = match status.state {
            crate::JobState::Finished {
                exit_code,
                timed_out,
                ..
            } => {
                if timed_out {
                    err.push(supervisor::TIMEOUT_NOTICE.as_bytes())?;
                    (Some(124), true)
                } else {
                    (Some(exit_code), false)
                }
            }
            _ => (None, false),
        };
        Ok(RunResult {
            exit_code: code,
            stdout: out.finish(),
            stderr: err.finish(),
            started_at,
            duration: clock.elapsed(),
            timed_out,
            backend: BackendKind::Daytona,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        cmd.validate()?;
        let place = self.own().await?;
        let t = SessionTransport {
            api: &self.api,
            place: &place,
        };
        let id = JobId::parse(&format!("{}.{}", place.sandbox_id, random_token(8)))?;
        let (_, dir) = self.parse_job(&id)?;
        let mut spec = cmd.clone();
        if spec.workdir.is_none() {
            spec.workdir = self.config.workdir.clone();
        }
        Self::jobs(&t).spawn(&dir, &spec, &spec.argv).await?;
        self.spawned.store(true, Ordering::Relaxed);
        Ok(id)
    }
}

impl Backend for DaytonaBackend {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn prepare(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.api.check().await })
    }

    fn run<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<RunResult>> {
        Box::pin(self.run_inner(cmd))
    }

    fn spawn<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<JobId>> {
        Box::pin(self.spawn_inner(cmd))
    }

    fn poll<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let (sb, dir) = self.parse_job(job)?;
            let place = self.place_for(&sb).await?;
            let t = SessionTransport {
                api: &self.api,
                place: &place,
            };
            Self::jobs(&t).poll(job, &dir).await
        })
    }

    fn read<'a>(
        &'a self,
        job: &'a JobId,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<OutputChunk>> {
        Box::pin(async move {
            let (sb, dir) = self.parse_job(job)?;
            let place = self.place_for(&sb).await?;
            let t = SessionTransport {
                api: &self.api,
                place: &place,
            };
            Self::jobs(&t).read(job, &dir, stream, offset, max).await
        })
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let (sb, dir) = self.parse_job(job)?;
            let place = self.place_for(&sb).await?;
            let t = SessionTransport {
                api: &self.api,
                place: &place,
            };
            Self::jobs(&t).wait(job, &dir, timeout).await
        })
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let (sb, dir) = self.parse_job(job)?;
            let place = self.place_for(&sb).await?;
            let t = SessionTransport {
                api: &self.api,
                place: &place,
            };
            Self::jobs(&t).kill(job, &dir).await
        })
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let (sb, dir) = self.parse_job(job)?;
            let place = self.place_for(&sb).await?;
            let t = SessionTransport {
                api: &self.api,
                place: &place,
            };
            Self::jobs(&t).forget(job, &dir).await
        })
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(place) = self.own.lock().await.take() else {
                return Ok(());
            };
            self.api
                .delete_session(&place.toolbox, &place.session)
                .await;
            if self.spawned.load(Ordering::Relaxed) {
                return Ok(());
            }
            let action = self
                .config
                .on_close
                .unwrap_or(if self.config.name.is_some() {
                    DaytonaOnClose::Stop
                } else {
                    DaytonaOnClose::Delete
                });
            match action {
                DaytonaOnClose::Delete => self.api.lifecycle(&place.sandbox_id, "delete").await,
                DaytonaOnClose::Stop => self.api.lifecycle(&place.sandbox_id, "stop").await,
                DaytonaOnClose::Keep => Ok(()),
            }
        })
    }
}
