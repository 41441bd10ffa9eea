//! The Slurm backend: each command is a job on a Slurm cluster, submitted with the cluster's
//! own client tools, run on a compute node under the [job script](script) (the supervisor's
//! timeout, tree kill and files), inside the cage (`nestbox run`) unless `cage = false`.
//!
//! - **Submission**: a foreground [`run`](Backend::run) holds an `srun` (about 30 ms to start
//!   on an idle cluster, against about a second for a batch job's scheduling cycle); a
//!   background [`spawn`](Backend::spawn) is an `sbatch` job, independent of this process.
//!   Both pass `--export=NONE`: nothing of this process's environment reaches the job; the
//!   forwarded variables go through a mode-600 file in the job directory that the job reads
//!   and deletes.
//! - **Output and status** live in the job directory on the shared filesystem (`jobs_dir`):
//!   this side reads them from offsets, so output survives this process going away, and any
//!   later process can read, poll and wait by job id.
//! - **Exit status, exactly**: the job script records the command's own exit code (128+N for
//!   signal N). When the job ended without recording one (cancelled before the script could,
//!   killed by Slurm's time limit, node failure), the state and `ExitCode=<code>:<signal>` come
//!   from `scontrol`, then `sacct`. `sbatch --wait` is never used: it exits 0 for a cancelled
//!   job.
//! - **Timeout**: enforced to the second by the job script on the node (SIGTERM to the whole
//!   tree, SIGKILL after the grace); Slurm's `--time` is set a minute above it as a backstop.
//! - **Kill**: the job is marked killed, then `scancel`: Slurm signals every process it tracks
//!   for the job, and the job script kills its own tree (process group and marked processes,
//!   so `setsid` children and children that ignore SIGTERM go too), then Slurm's SIGKILL after
//!   KillWait. [`kill`](Backend::kill) returns once the scheduler reports the job ended.
//! - **Job ids** are `<slurm job id>.<token>`: the Slurm id for `scancel`/`scontrol`, the
//!   token for the job directory.

pub(crate) mod client;
mod jobdir;
pub(crate) mod script;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, Cancellation, CommandSpec, Descriptor, ExposedPath,
    ExposureSource, HostExposure, Isolation, JobId, JobState, JobStatus, OutputChunk, RunResult,
    Stream,
};
use crate::config::SlurmConfig;
use crate::error::{ExecError, Result};
use crate::job::{MAX_READ, random_token};
use crate::output::Capture;
use client::{SchedulerJob, Tools};
use jobdir::{Files, JobDir};
use script::JobScript;

/// Seconds between SIGTERM and SIGKILL when the job script kills a tree.
const GRACE_SECS: u64 = 2;
/// How much longer than the command's timeout Slurm's own time limit is.
const SLURM_LIMIT_MARGIN: Duration = Duration::from_secs(60);
/// How often a wait asks the scheduler, when the files say nothing yet.
const SCHEDULER_POLL: Duration = Duration::from_secs(1);
/// How long a kill waits for the scheduler to report the job ended.
const KILL_WAIT: Duration = Duration::from_secs(90);

/// A backend that runs each command as a Slurm job.
pub struct SlurmBackend {
    config: SlurmConfig,
    ctx: Context,
    tools: Tools,
    jobs_dir: PathBuf,
    workdir: String,
    descriptor: Descriptor,
}

fn default_jobs_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache/nestbox/slurm-jobs")
}

/// `--time` in whole minutes, rounded up (Slurm's smallest unit).
fn minutes(d: Duration) -> u64 {
    d.as_secs().div_ceil(60).max(1)
}

impl SlurmBackend {
    /// Builds the backend (checks the configuration; the controller is asked in
    /// [`prepare`](Backend::prepare)).
    pub(crate) fn new(config: &SlurmConfig, ctx: Context) -> Result<Self> {
        let invalid = |reason: String| ExecError::InvalidConfig {
            backend: BackendKind::Slurm,
            reason,
        };
        if config.cpus == Some(0) {
            return Err(invalid("cpus must be at least 1".into()));
        }
        let jobs_dir = config.jobs_dir.clone().unwrap_or_else(default_jobs_dir);
        if !jobs_dir.is_absolute() {
            return Err(invalid(format!(
                "jobs_dir must be an absolute path on the shared filesystem, not {}",
                jobs_dir.display()
            )));
        }
        let workdir = match &config.workdir {
            Some(w) => w.clone(),
            None => std::env::current_dir()
                .map_err(|e| ExecError::io("finding the current directory", e))?
                .to_string_lossy()
                .into_owned(),
        };
        let tools = Tools {
            bin_dir: config.bin_dir.clone(),
            slurm_conf: config.slurm_conf.clone(),
        };
        let descriptor = describe(config, &workdir, &jobs_dir);
        Ok(SlurmBackend {
            config: config.clone(),
            ctx,
            tools,
            jobs_dir,
            workdir,
            descriptor,
        })
    }

    fn launcher(&self) -> &str {
        self.config.launcher.as_deref().unwrap_or("nestbox")
    }

    /// What the job runs: the command, or `nestbox run ... -- command` with the cage.
    fn job_argv(&self, cmd: &CommandSpec, workdir: &str) -> Vec<String> {
        if !self.config.cage {
            return cmd.argv.clone();
        }
        let mut a = vec![self.launcher().to_string(), "run".into()];
        if let Some(p) = &self.config.policy {
            a.extend(["--policy".into(), p.clone()]);
        }
        if self.config.best_effort {
            a.push("--best-effort".into());
        }
        a.extend(["--workdir".into(), workdir.to_string()]);
        for name in cmd.env.keys() {
            a.extend(["--env".into(), name.clone()]);
        }
        a.push("--".into());
        a.extend(cmd.argv.iter().cloned());
        a
    }

    /// Options shared by `srun` and `sbatch`.
    fn resource_args(&self, cmd: &CommandSpec, name: &str, dir: &JobDir) -> Vec<String> {
        let mut a = vec![
            "--export=NONE".to_string(),
            format!("--job-name={name}"),
            // The job script enters the working directory itself and refuses when it cannot;
            // Slurm's own --chdir would fall back to /tmp.
            format!("--chdir={}", dir.path().display()),
        ];
        if let Some(p) = &self.config.partition {
            a.push(format!("--partition={p}"));
        }
        if let Some(acc) = &self.config.account {
            a.push(format!("--account={acc}"));
        }
        if let Some(c) = self.config.cpus {
            a.push(format!("--cpus-per-task={c}"));
        }
        if let Some(m) = self.config.memory {
            a.push(format!("--mem={}M", m.div_ceil(1 << 20).max(1)));
        }
        let limit = match cmd.timeout {
            Some(t) => Some(t + Duration::from_secs(GRACE_SECS) + SLURM_LIMIT_MARGIN),
            None => self.config.time_limit,
        };
        if let Some(l) = limit {
            a.push(format!("--time={}", minutes(l)));
        }
        a
    }

    /// Creates the job directory (with the env file) and the job script for `cmd`.
    fn prepare_job(&self, cmd: &CommandSpec) -> Result<(String, JobDir, String)> {
        cmd.validate()?;
        let token = random_token(8);
        let dir = JobDir::create(&self.jobs_dir, &token)?;
        if !cmd.env.is_empty() {
            dir.write_env(&script::env_file(&cmd.env))?;
        }
        let workdir = cmd.workdir.clone().unwrap_or_else(|| self.workdir.clone());
        let argv = self.job_argv(cmd, &workdir);
        let dir_text = dir.path().to_string_lossy().into_owned();
        let text = JobScript {
            dir: &dir_text,
            workdir: &workdir,
            timeout_secs: crate::supervisor::timeout_secs(cmd.timeout),
            grace_secs: GRACE_SECS,
            cage: self.config.cage.then(|| self.launcher()),
            program: &cmd.argv[0],
            argv: &argv,
        }
        .text();
        Ok((token, dir, text))
    }

    fn parse_job(&self, job: &JobId) -> Result<(String, JobDir)> {
        let (slurm, token) = job.as_str().split_once('.').ok_or_else(|| {
            ExecError::InvalidRequest(format!(
                "`{job}` is not a Slurm job id of nestbox (<slurm id>.<token>)"
            ))
        })?;
        if slurm.is_empty() || !slurm.chars().all(|c| c.is_ascii_digit()) || token.is_empty() {
            return Err(ExecError::InvalidRequest(format!(
                "`{job}` is not a Slurm job id of nestbox (<slurm id>.<token>)"
            )));
        }
        Ok((slurm.to_string(), JobDir::at(&self.jobs_dir, token)))
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        let started_at = SystemTime::now();
        let clock = Instant::now();
        let (token, dir, text) = self.prepare_job(cmd)?;
        let result = self
            .run_srun(cmd, &token, &dir, &text, started_at, clock)
            .await;
        // srun has exited, so the job script has too: nothing will write here any more.
        let _ = dir.remove();
        result
    }

    async fn run_srun(
        &self,
        cmd: &CommandSpec,
        token: &str,
        dir: &JobDir,
        text: &str,
        started_at: SystemTime,
        clock: Instant,
    ) -> Result<RunResult> {
        let name = format!("nestbox-{token}");
        let mut srun = self.tools.command("srun");
        srun.args(self.resource_args(cmd, &name, dir))
            .arg("--quiet")
            .args(["/bin/sh", "-c", text, "nestbox-slurm"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child = srun.spawn().map_err(|e| self.tools.missing("srun", e))?;
        let mut srun_err = child.stderr.take().expect("piped stderr");
        let stderr_task = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut text = Vec::new();
            let _ = (&mut srun_err).take(64 * 1024).read_to_end(&mut text).await;
            String::from_utf8_lossy(&text).into_owned()
        });

        let spill = self.ctx.spill_dir();
        let mut out = Capture::new(&self.ctx.output, &spill, "slurm-stdout");
        let mut err = Capture::new(&self.ctx.output, &spill, "slurm-stderr");
        // The job script enforces the timeout; this deadline only covers a job that never
        // started or a script that could not act (then the job is cancelled).
        let deadline = cmd
            .timeout
            .map(|t| clock + t + Duration::from_secs(GRACE_SECS + 10));
        let mut deadline_hit = false;
        let srun_status = loop {
            pump(dir, &mut out, &mut err)?;
            if let Some(status) = child
                .try_wait()
                .map_err(|e| ExecError::io("waiting for srun", e))?
            {
                break status;
            }
            if !deadline_hit && deadline.is_some_and(|d| Instant::now() >= d) {
                deadline_hit = true;
                dir.mark_killed();
                let _ = self.tools.cancel_by_name(&name).await;
            }
            tokio::time::sleep(self.config.poll_interval).await;
        };
        pump(dir, &mut out, &mut err)?;
        let srun_stderr = stderr_task.await.unwrap_or_default();
        let files = dir.files();
        if files.not_found {
            return Err(ExecError::CommandNotFound {
                backend: BackendKind::Slurm,
                program: cmd.argv[0].clone(),
                detail: None,
            });
        }
        let Some(code) = files.status else {
            if let Some(reason) = dir.refusal(Some(&srun_stderr)) {
                return Err(ExecError::Refused {
                    backend: BackendKind::Slurm,
                    message: reason,
                });
            }
            if deadline_hit {
                return Ok(RunResult {
                    exit_code: srun_status.code(),
                    stdout: out.finish(),
                    stderr: err.finish(),
                    started_at,
                    duration: clock.elapsed(),
                    timed_out: true,
                    backend: BackendKind::Slurm,
                });
            }
            return Err(ExecError::Engine {
                backend: BackendKind::Slurm,
                action: "run the job (srun)".into(),
                message: format!(
                    "srun exited {:?} and the job recorded no end: {}",
                    srun_status.code(),
                    srun_stderr.trim()
                ),
            });
        };
        // As every backend's foreground run: 124 and a last line on stderr after a timeout.
        let code = if files.timed_out {
            err.push(crate::supervisor::TIMEOUT_NOTICE.as_bytes())?;
            124
        } else {
            code
        };
        let stdout = out.finish();
        let stderr = err.finish();
        if code == 125 && self.config.cage {
            let text = String::from_utf8_lossy(stderr.last_bytes());

            if let Some(reason) = text
                .trim_end()
                .lines()
                .last()
                .and_then(|l| l.strip_prefix("nestbox: "))
            {
                return Err(ExecError::Refused {
                    backend: BackendKind::Slurm,
                    message: format!("the cage on the compute node refused: {reason}"),
                });
            }
        }
        Ok(RunResult {
            exit_code: Some(code),
            stdout,
            stderr,
            started_at,
            duration: clock.elapsed(),
            timed_out: files.timed_out || deadline_hit,
            backend: BackendKind::Slurm,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        let (token, dir, text) = self.prepare_job(cmd)?;
        let name = format!("nestbox-{token}");
        let mut args = self.resource_args(cmd, &name, &dir);
        args.push("--parsable".into());
        args.push(format!(
            "--output={}",
            dir.path().join("script.out").display()
        ));
        args.push(format!(
            "--error={}",
            dir.path().join("script.err").display()
        ));
        match self.tools.sbatch(&args, &text).await {
            Ok(id) => JobId::parse(&format!("{id}.{token}")),
            Err(e) => {
                let _ = dir.remove();
                Err(e)
            }
        }
    }

    /// The job's status from its files, asking the scheduler only when they cannot tell.
    async fn status(&self, job: &JobId, force_scheduler: bool) -> Result<JobStatus> {
        let (slurm, dir) = self.parse_job(job)?;
        if !dir.exists() {
            return Err(dir.missing(job.as_str()));
        }
        let files = dir.files();
        // A recorded end is exact; a death by signal may still be the scheduler's doing
        // (time limit, a cancel from outside), which only the scheduler can say.
        let needs_scheduler = force_scheduler
            || match files.status {
                None => true,
                Some(code) => code > 128 && !files.killed && !files.timed_out,
            };
        let scheduler = if needs_scheduler {
            self.tools.state(&slurm).await?
        } else {
            None
        };
        // The job may have written its status while we asked.
        let files = if files.status.is_none() {
            dir.files()
        } else {
            files
        };
        Ok(combine(job, &files, scheduler.as_ref()))
    }

    async fn wait_inner(&self, job: &JobId, timeout: Option<Duration>) -> Result<JobStatus> {
        let start = Instant::now();
        let mut last_scheduler = Instant::now();
        let mut status = self.status(job, false).await?;
        loop {
            if status.is_done() || timeout.is_some_and(|t| start.elapsed() >= t) {
                return Ok(status);
            }
            tokio::time::sleep(self.config.poll_interval).await;
            let (_, dir) = self.parse_job(job)?;
            if dir.files().status.is_some() {
                status = self.status(job, false).await?;
            } else if last_scheduler.elapsed() >= SCHEDULER_POLL {
                last_scheduler = Instant::now();
                status = self.status(job, false).await?;
            }
        }
    }

    async fn kill_inner(&self, job: &JobId) -> Result<JobStatus> {
        let (slurm, dir) = self.parse_job(job)?;
        let status = self.status(job, false).await?;
        if status.is_done() {
            return Ok(status);
        }
        dir.mark_killed();
        self.tools.cancel(&slurm).await?;
        // Done when the scheduler has finished the job: Slurm has then signalled and reaped
        // every process it tracks for it.
        let start = Instant::now();
        loop {
            let scheduler = self.tools.state(&slurm).await?;
            if scheduler.as_ref().is_none_or(SchedulerJob::is_terminal) {
                return Ok(combine(job, &dir.files(), scheduler.as_ref()));
            }
            if start.elapsed() > KILL_WAIT {
                return Err(ExecError::Engine {
                    backend: BackendKind::Slurm,
                    action: format!("cancel job {slurm}"),
                    message: format!(
                        "the job is still {} {} s after scancel",
                        scheduler.map(|s| s.state).unwrap_or_default(),
                        KILL_WAIT.as_secs()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn read_inner(
        &self,
        job: &JobId,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        let status = self.status(job, false).await?;
        let (_, dir) = self.parse_job(job)?;
        let data = dir.read(stream, offset, max.min(MAX_READ))?;
        Ok(OutputChunk::read_at(&status, stream, offset, data))
    }

    async fn forget_inner(&self, job: &JobId) -> Result<()> {
        let status = self.status(job, false).await?;
        if !status.is_done() {
            self.kill_inner(job).await?;
        }
        let (_, dir) = self.parse_job(job)?;
        dir.remove()
    }
}

/// Copies what the job's files gained into the captures.
fn pump(dir: &JobDir, out: &mut Capture, err: &mut Capture) -> Result<()> {
    for (stream, capture) in [(Stream::Stdout, out), (Stream::Stderr, err)] {
        loop {
            let data = dir.read(stream, capture.total(), 1 << 20)?;
            if data.is_empty() {
                break;
            }
            capture.push(&data)?;
        }
    }
    Ok(())
}

/// The job's status from its files and, when asked, the scheduler's view.
fn combine(job: &JobId, files: &Files, scheduler: Option<&SchedulerJob>) -> JobStatus {
    let scheduler_timeout = scheduler.is_some_and(|s| s.state == "TIMEOUT");
    let cancelled = scheduler.is_some_and(|s| s.state == "CANCELLED");
    let state = match (files.status, scheduler) {
        // Asked because the command died of a signal, while Slurm is still ending the job
        // (COMPLETING after a scancel): not done until the scheduler says whose signal it was.
        (Some(_), Some(s)) if !s.is_terminal() => JobState::Running,
        (Some(code), _) => JobState::Finished {
            exit_code: code,
            timed_out: files.timed_out || scheduler_timeout,
            killed: files.killed || cancelled,
        },
        (None, Some(s)) if !s.is_terminal() => JobState::Running,
        (None, Some(s)) => match s.state.as_str() {
            "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "OUT_OF_MEMORY" => {
                JobState::Finished {
                    exit_code: if s.state == "OUT_OF_MEMORY" && s.exit_code() == 0 {
                        137
                    } else {
                        s.exit_code()
                    },
                    timed_out: files.timed_out || scheduler_timeout,
                    killed: files.killed || cancelled,
                }
            }
            // NODE_FAIL, BOOT_FAIL, PREEMPTED, DEADLINE, REVOKED...: the job's end was not
            // recorded and the scheduler does not know the command's code.
            _ => JobState::Lost,
        },
        (None, None) => JobState::Lost,
    };
    JobStatus {
        id: job.clone(),
        state,
        stdout_bytes: files.stdout_bytes,
        stderr_bytes: files.stderr_bytes,
        started_at: files.started,
        finished_at: files.finished,
    }
}

fn describe(config: &SlurmConfig, workdir: &str, jobs_dir: &Path) -> Descriptor {
    let partition = config
        .partition
        .as_deref()
        .unwrap_or("the default partition");
    let target = format!(
        "Slurm, {partition}{}",
        config
            .slurm_conf
            .as_ref()
            .map(|c| format!(" ({})", c.display()))
            .unwrap_or_default()
    );
    let jobs = ExposedPath {
        host: jobs_dir.display().to_string(),
        target: jobs_dir.display().to_string(),
        read_only: false,
        via: ExposureSource::CagePolicy,
    };
    let (isolation, host_exposure) = if config.cage {
        (
            Isolation::Cage,
            HostExposure {
                exposed: true,
                paths: vec![ExposedPath {
                    host: workdir.to_string(),
                    target: workdir.to_string(),
                    read_only: false,
                    via: ExposureSource::CagePolicy,
                }],
                notes: vec![format!(
                    "paths on the compute node, caged there by nestbox run (policy: {}); the job directory {} is written by the job script outside the cage",
                    config.policy.as_deref().unwrap_or("the default"),
                    jobs_dir.display()
                )],
            },
        )
    } else {
        (
            Isolation::SchedulerJob,
            HostExposure {
                exposed: true,
                paths: vec![
                    ExposedPath {
                        host: "the cluster account on the compute node".into(),
                        target: "*".into(),
                        read_only: false,
                        via: ExposureSource::RemoteAccount,
                    },
                    jobs,
                ],
                notes: vec![
                    "cage = false: no sandbox on the compute node; the command has the cluster account's rights".into(),
                ],
            },
        )
    };
    Descriptor {
        kind: BackendKind::Slurm,
        isolation,
        host_exposure,
        streams_output: true,
        cancellation: Cancellation::Scheduler,
        target,
    }
}

impl Backend for SlurmBackend {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn prepare(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.tools.ping().await })
    }

    fn run<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<RunResult>> {
        Box::pin(self.run_inner(cmd))
    }

    fn spawn<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<JobId>> {
        Box::pin(self.spawn_inner(cmd))
    }

    fn poll<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(self.status(job, false))
    }

    fn read<'a>(
        &'a self,
        job: &'a JobId,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<OutputChunk>> {
        Box::pin(self.read_inner(job, stream, offset, max))
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(self.wait_inner(job, timeout))
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(self.kill_inner(job))
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.forget_inner(job))
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> JobId {
        JobId::parse("12.ab").unwrap()
    }

    #[test]
    fn a_recorded_exit_code_wins_over_the_scheduler() {
        let files = Files {
            status: Some(3),
            ..Files::default()
        };
        let s = combine(&id(), &files, None);
        assert_eq!(
            s.state,
            JobState::Finished {
                exit_code: 3,
                timed_out: false,
                killed: false
            }
        );
    }

    #[test]
    fn a_cancelled_job_without_a_record_reports_the_signal_not_success() {
        let sched = SchedulerJob {
            state: "CANCELLED".into(),
            exit: (0, 15),
        };
        let s = combine(&id(), &Files::default(), Some(&sched));
        assert_eq!(
            s.state,
            JobState::Finished {
                exit_code: 143,
                timed_out: false,
                killed: true
            }
        );
    }

    #[test]
    fn slurm_time_limits_count_as_timeouts_and_node_failures_as_lost() {
        let t = SchedulerJob {
            state: "TIMEOUT".into(),
            exit: (0, 15),
        };
        assert!(matches!(
            combine(&id(), &Files::default(), Some(&t)).state,
            JobState::Finished {
                timed_out: true,
                ..
            }
        ));
        let n = SchedulerJob {
            state: "NODE_FAIL".into(),
            exit: (0, 0),
        };
        assert_eq!(
            combine(&id(), &Files::default(), Some(&n)).state,
            JobState::Lost
        );
        let p = SchedulerJob {
            state: "PENDING".into(),
            exit: (0, 0),
        };
        assert_eq!(
            combine(&id(), &Files::default(), Some(&p)).state,
            JobState::Running
        );
    }

    #[test]
    fn time_limits_round_up_to_minutes() {
        assert_eq!(minutes(Duration::from_secs(1)), 1);
        assert_eq!(minutes(Duration::from_secs(61)), 2);
        assert_eq!(minutes(Duration::from_secs(120)), 2);
    }
}
