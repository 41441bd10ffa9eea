//! The Modal backend: commands run in a Modal sandbox, over Modal's gRPC API, natively (tonic
//! clients generated from the vendored subset of the definitions Modal publishes in its
//! Python client, see `crates/exec/proto/modal`).
//!
//! - **Credentials**: [direct, managed or auto](credentials), decided before anything
//!   connects; an explicit mode never falls back to the other, and a credential gateway that
//!   does not answer (or refuses the placeholders) fails closed in [`prepare`](Backend::prepare).
//! - **The sandbox**: created on the first command (app found or created, image built from
//!   `FROM <image>` or an `im-...` id used as is, `sleep infinity` as its entrypoint, the
//!   configured CPU, memory, disk, network block and lifetime), then reached through its
//!   task's command router.
//! - **Commands** run under the job [supervisor](crate::supervisor) inside the sandbox: the
//!   timeout and kills reach the whole tree there; standard output and error are two streams,
//!   resumed by offset after a dropped connection. The environment travels in the exec
//!   request's `env` field, never on a command line.
//! - **Backstop**: if a foreground command has not ended well after its timeout (the
//!   supervisor could not act, the router stopped answering), the sandbox is terminated.
//! - [`close`](Backend::close) terminates the sandbox, unless background jobs were started in
//!   it: they keep running until `sandbox_timeout` (or `idle_timeout`) ends it. Job ids are
//!   `<sandbox id>.<token>`, so any later process can reach them.
//!
//! **Not exercised against the live service**: Modal cannot be reached from the machines this
//! project is built on. The tests run against a local fake server generated from the same
//! definitions; field numbers match Modal's published ones, but the service's behaviour
//! (timing, error codes, what the server does with `x-modal-client-version`) is not verified.

mod client;
pub mod credentials;
mod exec;
mod proto;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, CommandSpec, Descriptor, JobId, JobStatus, OutputChunk,
    RunResult, Stream,
};
use crate::config::ModalConfig;
use crate::error::{ExecError, Result};
use crate::job::{Jobs, random_token, supervised_end};
use crate::output::Capture;
use crate::supervisor;
use client::{ControlPlane, Router};
use credentials::Resolved;
use exec::{RouterTransport, run_exec};
use proto::client as pb;

/// Seconds between SIGTERM and SIGKILL when the supervisor kills a tree.
const GRACE_SECS: u64 = 2;
/// Where job directories live inside the sandbox.
const JOBS_DIR: &str = "/tmp/nestbox-jobs";
/// How long after a foreground timeout the sandbox is terminated if the command has not ended.
const BACKSTOP: Duration = Duration::from_secs(15);

/// The sandbox this backend created and its router.
struct Live {
    sandbox_id: String,
    router: Router,
}

/// A backend that runs commands in a Modal sandbox.
pub struct ModalBackend {
    config: ModalConfig,
    ctx: Context,
    creds: Resolved,
    plane: Option<ControlPlane>,
    live: tokio::sync::Mutex<Option<Live>>,
    spawned: AtomicBool,
    descriptor: Descriptor,
}

fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl ModalBackend {
    /// Builds the backend: checks the configuration and chooses the credentials (the API is
    /// reached in [`prepare`](Backend::prepare)).
    pub(crate) fn new(config: &ModalConfig, ctx: Context) -> Result<Self> {
        if config.image.trim().is_empty() {
            return Err(ExecError::InvalidConfig {
                backend: BackendKind::Modal,
                reason:
                    "no image: set image to a registry reference (python:3.12-slim) or an im-... id"
                        .into(),
            });
        }
        let creds = credentials::resolve(config, &env_lookup)?;
        credentials::check_url(&creds.server_url)?;
        let descriptor = Descriptor::remote_sandbox(
            BackendKind::Modal,
            "Modal",
            config.block_network,
            format!(
                "Modal sandbox ({}) at {}, credentials from {}",
                config.image, creds.server_url, creds.source
            ),
        );
        Ok(ModalBackend {
            config: config.clone(),
            ctx,
            creds,
            plane: None,
            live: tokio::sync::Mutex::new(None),
            spawned: AtomicBool::new(false),
            descriptor,
        })
    }

    fn plane(&self) -> Result<&ControlPlane> {
        self.plane.as_ref().ok_or_else(|| ExecError::Unavailable {
            backend: BackendKind::Modal,
            reason: "the backend was not prepared".into(),
            hint: Some("open it with nestbox_exec::open".into()),
        })
    }

    fn definition(&self, image_id: String) -> pb::Sandbox {
        let c = &self.config;
        let mb = |bytes: u64| u32::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX);
        let secs = |d: Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
        pb::Sandbox {
            entrypoint_args: vec!["sleep".into(), "infinity".into()],
            image_id,
            resources: Some(pb::Resources {
                memory_mb: c.memory.map(mb).unwrap_or(0),
                milli_cpu: c.cpu.map(|x| (x * 1000.0).ceil() as u32).unwrap_or(0),
                ephemeral_disk_mb: c.disk.map(mb).unwrap_or(0),
            }),
            timeout_secs: secs(c.sandbox_timeout),
            workdir: c.workdir.clone(),
            block_network: c.block_network,
            name: None,
            idle_timeout_secs: c.idle_timeout.map(secs),
        }
    }

    /// This backend's sandbox, created on first use.
    async fn own(&self) -> Result<(String, Router)> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref() {
            return Ok((l.sandbox_id.clone(), l.router.clone()));
        }
        let plane = self.plane()?;
        let app = plane.app(&self.config.app_name).await?;
        let image = if self.config.image.starts_with("im-") {
            self.config.image.clone()
        } else {
            plane
                .image(&app, &self.config.image, self.config.start_timeout)
                .await?
        };
        let sandbox_id = plane.create_sandbox(&app, self.definition(image)).await?;
        let task = plane
            .task_id(&sandbox_id, self.config.start_timeout)
            .await?;
        let router = plane.router(&task, self.config.connect_timeout).await?;
        *live = Some(Live {
            sandbox_id: sandbox_id.clone(),
            router: router.clone(),
        });
        Ok((sandbox_id, router))
    }

    /// The router of the sandbox a job lives in.
    async fn router_for(&self, sandbox_id: &str) -> Result<Router> {
        if let Some(l) = self.live.lock().await.as_ref()
            && l.sandbox_id == sandbox_id
        {
            return Ok(l.router.clone());
        }
        let plane = self.plane()?;
        let task = plane.task_id(sandbox_id, self.config.start_timeout).await?;
        plane.router(&task, self.config.connect_timeout).await
    }

    fn parse_job(job: &JobId) -> Result<(String, String)> {
        match job.as_str().rsplit_once('.') {
            Some((sb, token)) if !sb.is_empty() && !token.is_empty() => {
                Ok((sb.to_string(), format!("{JOBS_DIR}/{token}")))
            }
            _ => Err(ExecError::InvalidRequest(format!(
                "`{job}` is not a Modal job id of nestbox (<sandbox id>.<token>)"
            ))),
        }
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        cmd.validate()?;
        let started_at = SystemTime::now();
        let clock = std::time::Instant::now();
        let (sandbox_id, router) = self.own().await?;
        let dir = format!("{JOBS_DIR}/{}", random_token(8));
        let workdir = cmd.workdir.as_deref().or(self.config.workdir.as_deref());
        let args = supervisor::start_args(
            &dir,
            workdir,
            supervisor::timeout_secs(cmd.timeout),
            GRACE_SECS,
            &cmd.argv,
        );
        let argv = supervisor::sh_argv("run", &args);
        let env: HashMap<String, String> = cmd.env.clone().into_iter().collect();
        let server_limit = cmd
            .timeout
            .map(|t| u32::try_from(t.as_secs() + GRACE_SECS + 30).unwrap_or(u32::MAX));
        let spill = self.ctx.spill_dir();
        let mut out = Capture::new(&self.ctx.output, &spill, "modal-stdout");
        let mut err = Capture::new(&self.ctx.output, &spill, "modal-stderr");
        let work = run_exec(&router, argv, env, server_limit, &mut out, &mut err);
        let (code, backstop_hit) = match cmd.timeout {
            None => (work.await?, false),
            Some(t) => {
                match tokio::time::timeout(t + Duration::from_secs(GRACE_SECS) + BACKSTOP, work)
                    .await
                {
                    Ok(r) => (r?, false),
                    Err(_) => {
                        // The supervisor did not end it: the whole sandbox goes.
                        self.plane()?.terminate(&sandbox_id).await?;
                        self.live.lock().await.take();
                        (None, true)
                    }
                }
            }
        };
        let stdout = out.finish();
        let stderr = err.finish();
        let timed_out = supervised_end(
            BackendKind::Modal,
            cmd,
            code,
            &stderr,
            backstop_hit.then_some(true),
        )?;

        Ok(RunResult {
            exit_code: code,
            stdout,
            stderr,
            started_at,
            duration: clock.elapsed(),
            timed_out,
            backend: BackendKind::Modal,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        cmd.validate()?;
        let (sandbox_id, router) = self.own().await?;
        let token = random_token(8);
        let mut cmd = cmd.clone();
        if cmd.workdir.is_none() {
            cmd.workdir = self.config.workdir.clone();
        }
        let t = RouterTransport { router: &router };
        self.jobs(&t)
            .spawn(&format!("{JOBS_DIR}/{token}"), &cmd, &cmd.argv)
            .await?;
        self.spawned.store(true, Ordering::Relaxed);
        JobId::parse(&format!("{sandbox_id}.{token}"))
    }

    fn jobs<'t>(&self, t: &'t RouterTransport<'_>) -> Jobs<'t> {
        Jobs {
            transport: t,
            kind: BackendKind::Modal,
            grace_secs: GRACE_SECS,
        }
    }
}

impl Backend for ModalBackend {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn prepare(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.plane.is_none() {
                self.plane =
                    Some(ControlPlane::connect(&self.creds, self.config.connect_timeout).await?);
            }
            Ok(())
        })
    }

    fn run<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<RunResult>> {
        Box::pin(self.run_inner(cmd))
    }

    fn spawn<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<JobId>> {
        Box::pin(self.spawn_inner(cmd))
    }

    fn poll<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let (sb, dir) = Self::parse_job(job)?;
            let router = self.router_for(&sb).await?;
            let t = RouterTransport { router: &router };
            self.jobs(&t).poll(job, &dir).await
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
            let (sb, dir) = Self::parse_job(job)?;
            let router = self.router_for(&sb).await?;
            let t = RouterTransport { router: &router };
            self.jobs(&t).read(job, &dir, stream, offset, max).await
        })
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let (sb, dir) = Self::parse_job(job)?;
            let router = self.router_for(&sb).await?;
            let t = RouterTransport { router: &router };
            self.jobs(&t).wait(job, &dir, timeout).await
        })
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let (sb, dir) = Self::parse_job(job)?;
            let router = self.router_for(&sb).await?;
            let t = RouterTransport { router: &router };
            self.jobs(&t).kill(job, &dir).await
        })
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let (sb, dir) = Self::parse_job(job)?;
            let router = self.router_for(&sb).await?;
            let t = RouterTransport { router: &router };
            self.jobs(&t).forget(job, &dir).await
        })
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let live = self.live.lock().await.take();
            if let (Some(l), false) = (live, self.spawned.load(Ordering::Relaxed)) {
                self.plane()?.terminate(&l.sandbox_id).await?;
            }
            Ok(())
        })
    }
}
