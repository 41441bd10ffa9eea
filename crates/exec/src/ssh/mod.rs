//! The SSH backend: commands run on another machine through the system `ssh`, over one
//! multiplexed connection per destination (see [`connection`]), under the job supervisor on
//! the remote host (see [`wrapper`]).
//!
//! - **Isolation**: none on the remote side. The command can do whatever the remote account
//!   can; the descriptor says so (`RemoteAccount`, the whole account exposed).
//! - **Environment**: values travel in the program on ssh's standard input, as `export` lines
//!   read by the remote `sh`; never on ssh's command line, never through `SendEnv` (which
//!   would need the server's `AcceptEnv`, and silently drops what it does not accept).
//! - **Kill and timeout**: carried out by the supervisor on the remote host, on the whole
//!   tree. A dropped connection loses nothing: the job keeps writing to its files, and a
//!   foreground run re-attaches from the offsets it has.
//! - [`close`](Backend::close) leaves the shared master running (other processes may be using
//!   it; it ends `control_persist` after its last use).
//!
//! Limits: the supervisor finds escaped descendants through `/proc/*/environ`, so on a remote
//! host that is not Linux (or without `/proc`) only the process group is killed. A descendant
//! that both leaves the process group and clears its environment escapes the kill.

pub mod connection;
pub mod wrapper;

use std::time::{Duration, SystemTime};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, Cancellation, CommandSpec, Descriptor, ExposedPath,
    ExposureSource, HostExposure, Isolation, JobId, JobStatus, OutputChunk, RunResult, Stream,
};
use crate::config::SshConfig;
use crate::error::Result;
use crate::job::{Jobs, random_token, supervised_end};
use crate::output::Capture;
use connection::Connection;
use wrapper::SshTransport;

/// Seconds between SIGTERM and SIGKILL when the remote supervisor kills a tree.
const GRACE_SECS: u64 = 2;

/// A backend that runs commands on another machine over SSH.
pub struct SshBackend {
    config: SshConfig,
    ctx: Context,
    conn: Connection,
    descriptor: Descriptor,
}

impl SshBackend {
    /// Builds the backend (checks the configuration and the control directory; connects in
    /// [`prepare`](Backend::prepare)).
    pub(crate) fn new(config: &SshConfig, ctx: Context) -> Result<Self> {
        let conn = Connection::new(config)?;
        let target = conn.describe(config);
        Ok(SshBackend {
            descriptor: Descriptor {
                kind: BackendKind::Ssh,
                isolation: Isolation::RemoteAccount,
                host_exposure: HostExposure {
                    exposed: true,
                    paths: vec![ExposedPath {
                        host: format!("{target} (the whole account)"),
                        target: "*".into(),
                        read_only: false,
                        via: ExposureSource::RemoteAccount,
                    }],
                    notes: vec![
                        "no sandbox on the remote host: the command has the account's rights"
                            .into(),
                    ],
                },
                streams_output: true,
                cancellation: Cancellation::SandboxSupervisor,
                target,
            },
            config: config.clone(),
            ctx,
            conn,
        })
    }

    /// The control socket of the shared connection (for tools and tests that need to reach
    /// the master, e.g. `ssh -O check`).
    pub fn control_path(&self) -> &std::path::Path {
        self.conn.control_path()
    }

    /// Closes the shared master connection now, for every process using it.
    pub fn disconnect(&self) {
        self.conn.exit_master();
    }

    fn transport(&self) -> SshTransport<'_> {
        SshTransport {
            conn: &self.conn,
            spill_dir: self.ctx.spill_dir(),
        }
    }

    /// A job's directory as the supervisor takes it: a bare name lands in the remote default
    /// (`~/.cache/nestbox/jobs`), else under the configured directory.
    fn job_dir(&self, id: &str) -> String {
        match &self.config.jobs_dir {
            Some(d) => format!("{}/{id}", d.trim_end_matches('/')),
            None => id.to_string(),
        }
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        cmd.validate()?;
        let started_at = SystemTime::now();
        let clock = std::time::Instant::now();
        let spill = self.ctx.spill_dir();
        let mut out = Capture::new(&self.ctx.output, &spill, "ssh-stdout");
        let mut err = Capture::new(&self.ctx.output, &spill, "ssh-stderr");
        let dir = self.job_dir(&random_token(8));
        let transport = self.transport();
        let workdir = cmd.workdir.as_deref().or(self.config.workdir.as_deref());
        let fg = wrapper::run_foreground(
            &self.conn,
            &transport,
            &dir,
            cmd,
            workdir,
            GRACE_SECS,
            self.config.reattach_for,
            &mut out,
            &mut err,
        )
        .await?;
        let stdout = out.finish();
        let stderr = err.finish();
        let known_timeout = if fg.deadline_hit {
            Some(true)
        } else {
            fg.timed_out
        };
        let timed_out = supervised_end(BackendKind::Ssh, cmd, fg.code, &stderr, known_timeout)?;
        Ok(RunResult {
            exit_code: fg.code,
            stdout,
            stderr,
            started_at,
            duration: clock.elapsed(),
            timed_out,
            backend: BackendKind::Ssh,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        cmd.validate()?;
        let id = JobId::parse(&random_token(8))?;
        let mut cmd = cmd.clone();
        if cmd.workdir.is_none() {
            cmd.workdir = self.config.workdir.clone();
        }
        let transport = self.transport();
        let jobs = self.jobs(&transport);
        jobs.spawn(&self.job_dir(id.as_str()), &cmd, &cmd.argv)
            .await?;
        Ok(id)
    }

    fn jobs<'t>(&self, transport: &'t SshTransport<'_>) -> Jobs<'t> {
        Jobs {
            transport,
            kind: BackendKind::Ssh,
            grace_secs: GRACE_SECS,
        }
    }
}

impl Backend for SshBackend {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn prepare(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.conn.ensure_master().await })
    }

    fn run<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<RunResult>> {
        Box::pin(self.run_inner(cmd))
    }

    fn spawn<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<JobId>> {
        Box::pin(self.spawn_inner(cmd))
    }

    fn poll<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let t = self.transport();
            self.jobs(&t).poll(job, &self.job_dir(job.as_str())).await
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
            let t = self.transport();
            self.jobs(&t)
                .read(job, &self.job_dir(job.as_str()), stream, offset, max)
                .await
        })
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let t = self.transport();
            self.jobs(&t)
                .wait(job, &self.job_dir(job.as_str()), timeout)
                .await
        })
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let t = self.transport();
            self.jobs(&t).kill(job, &self.job_dir(job.as_str())).await
        })
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let t = self.transport();
            self.jobs(&t).forget(job, &self.job_dir(job.as_str())).await
        })
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}
