//! The local backend: every command is a caged step (Landlock + seccomp, clean environment,
//! private temp dir) run by the `nestbox run` launcher as a child process.
//!
//! Each command gets its own launcher. The launcher is the step's supervisor: a subreaper that
//! forwards signals to every process of the step, enforces `--timeout` (SIGTERM to the whole
//! tree, SIGKILL two seconds later) and kills leftovers when the step's main process ends. It
//! takes over its process's signal handling to do that, which is why it runs as a separate
//! process and never inside a long-lived, multi-job caller like this library.
//!
//! - **Environment**: the launcher's environment is cleared except `PATH` and `LANG`, then the
//!   forwarded variables are set in it, and the launcher is told their *names*
//!   (`--env NAME`). Values never appear in its argument vector.
//! - **Timeout**: `--timeout` makes the launcher kill the tree; if it has not ended 5 s after
//!   that, this backend sends the launcher SIGTERM (which it forwards to the whole tree), and
//!   SIGKILL 5 s later.
//! - **Background jobs**: the [supervisor](crate::supervisor) runs on this machine around the
//!   launcher, with the job's files under `<state dir>/jobs/local`. Killing a job sends
//!   SIGTERM to the launcher's process group, which the launcher turns into the step's tree
//!   kill, and SIGKILL after 5 s.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, Cancellation, CommandSpec, Descriptor, ExposedPath,
    ExposureSource, HostExposure, Isolation, JobId, JobState, JobStatus, OutputChunk, RunResult,
    Stream,
};
use crate::config::LocalConfig;
use crate::error::{ExecError, Result};
use crate::host::{HostTransport, run_child};
use crate::job::{Jobs, random_token};

/// Seconds the launcher waits between SIGTERM and SIGKILL (the cage's own grace).
const CAGE_GRACE: Duration = Duration::from_secs(2);
/// Our grace on top of the launcher's, before we signal the launcher itself.
const LAUNCHER_GRACE: Duration = Duration::from_secs(5);
/// What the launcher prints when `--timeout` ended the step.
const CAGE_TIMEOUT_NOTICE: &str = "nestbox: step timed out after";

/// A backend that runs each command as a caged step on this machine.
pub struct LocalBackend {
    config: LocalConfig,
    ctx: Context,
    launcher: PathBuf,
    workdir: PathBuf,
    descriptor: Descriptor,
    transport: HostTransport,
}

/// Finds the `nestbox` executable: the configured one, this program when it is `nestbox`, or
/// `nestbox` on `PATH`. The local backend launches caged steps with it; the Docker backend its
/// containers' relays.
pub(crate) fn find_nestbox(
    configured: Option<&std::path::Path>,
    backend: BackendKind,
) -> Result<PathBuf> {
    if let Some(p) = configured {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(ExecError::Unavailable {
                backend,
                reason: format!("the nestbox executable {} does not exist", p.display()),
                hint: Some("set launcher to the path of the nestbox executable".into()),
            })
        };
    }
    if let Ok(me) = std::env::current_exe()
        && me.file_name().is_some_and(|n| n == "nestbox")
    {
        return Ok(me);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("nestbox"))
        .find(|p| p.is_file())
        .ok_or_else(|| ExecError::Unavailable {
            backend,
            reason: "no nestbox executable (to launch caged steps, or a relay) found".into(),
            hint: Some(
                "install nestbox on PATH, or set launcher in the local configuration".into(),
            ),
        })
}

impl LocalBackend {
    /// Builds the backend (finds the launcher; nothing runs yet).
    pub(crate) fn new(config: &LocalConfig, ctx: Context) -> Result<Self> {
        let launcher = find_nestbox(config.launcher.as_deref(), BackendKind::Local)?;
        let workdir = match &config.workdir {
            Some(w) => w.clone(),
            None => std::env::current_dir()
                .map_err(|e| ExecError::io("finding the current directory", e))?,
        };
        let descriptor = Descriptor {
            kind: BackendKind::Local,
            isolation: Isolation::Cage,
            host_exposure: exposure(config, &workdir),
            streams_output: true,
            cancellation: Cancellation::CageSupervisor,
            target: format!("cage on this machine via {}", launcher.display()),
        };
        Ok(LocalBackend {
            config: config.clone(),
            ctx,
            launcher,
            workdir,
            descriptor,
            transport: HostTransport {
                kind: BackendKind::Local,
            },
        })
    }

    /// The launcher's arguments for `cmd` (names only for the environment).
    fn launcher_args(&self, cmd: &CommandSpec) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["run".into()];
        if let Some(p) = &self.config.policy {
            a.push("--policy".into());
            a.push(p.into());
        }
        for (flag, list) in [
            ("--read", &self.config.read),
            ("--write", &self.config.write),
            ("--exec", &self.config.exec),
        ] {
            for item in list {
                a.push(flag.into());
                a.push(item.into());
            }
        }
        if self.config.best_effort {
            a.push("--best-effort".into());
        }
        let workdir = cmd
            .workdir
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.workdir.clone());
        a.push("--workdir".into());
        a.push(workdir.into());
        if let Some(t) = cmd.timeout {
            a.push("--timeout".into());
            a.push(format!("{}ms", t.as_millis().max(1)).into());
        }
        for name in cmd.env.keys() {
            a.push("--env".into());
            a.push(name.into());
        }
        a.push("--".into());
        a.extend(cmd.argv.iter().map(OsString::from));
        a
    }

    fn job_dir(&self, id: &JobId) -> String {
        self.ctx
            .state_dir
            .join("jobs/local")
            .join(id.as_str())
            .to_string_lossy()
            .into_owned()
    }

    fn jobs(&self) -> Jobs<'_> {
        Jobs {
            transport: &self.transport,
            kind: BackendKind::Local,
            grace_secs: LAUNCHER_GRACE.as_secs(),
        }
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        cmd.validate()?;
        let started_at = SystemTime::now();
        let clock = std::time::Instant::now();
        let mut child = tokio::process::Command::new(&self.launcher);
        child.args(self.launcher_args(cmd)).env_clear();
        for keep in ["PATH", "LANG"] {
            if let Some(v) = std::env::var_os(keep) {
                child.env(keep, v);
            }
        }
        child.envs(&cmd.env);
        let deadline = cmd.timeout.map(|t| t + CAGE_GRACE + LAUNCHER_GRACE);
        let end = run_child(
            BackendKind::Local,
            child,
            deadline,
            LAUNCHER_GRACE,
            &self.ctx.output,
            &self.ctx.spill_dir(),
        )
        .await?;
        let stderr_tail = String::from_utf8_lossy(end.stderr.last_bytes());
        match end.code {
            Some(125) if last_line(&stderr_tail).starts_with("nestbox: ") => {
                return Err(ExecError::Refused {
                    backend: BackendKind::Local,
                    message: last_line(&stderr_tail)
                        .trim_start_matches("nestbox: ")
                        .to_string(),
                });
            }
            Some(127)
                if last_line(&stderr_tail).starts_with("nestbox: ")
                    && stderr_tail.contains("command not found") =>
            {
                return Err(ExecError::CommandNotFound {
                    backend: BackendKind::Local,
                    program: cmd.argv[0].clone(),
                    detail: Some(
                        last_line(&stderr_tail)
                            .trim_start_matches("nestbox: ")
                            .into(),
                    ),
                });
            }
            _ => {}
        }
        let timed_out = end.deadline_hit
            || (end.code == Some(124) && stderr_tail.contains(CAGE_TIMEOUT_NOTICE));
        Ok(RunResult {
            exit_code: end.code,
            stdout: end.stdout,
            stderr: end.stderr,
            started_at,
            duration: clock.elapsed(),
            timed_out,
            backend: BackendKind::Local,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        cmd.validate()?;
        let id = JobId::parse(&random_token(8))?;
        let mut argv: Vec<String> = vec![self.launcher.to_string_lossy().into_owned()];
        argv.extend(
            self.launcher_args(cmd)
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned()),
        );
        // The launcher enforces the timeout; the supervisor's watchdog is only a backstop.
        let outer = CommandSpec {
            argv: argv.clone(),
            env: cmd.env.clone(),
            workdir: None,
            timeout: cmd.timeout.map(|t| t + CAGE_GRACE + LAUNCHER_GRACE),
        };
        self.jobs().spawn(&self.job_dir(&id), &outer, &argv).await?;
        Ok(id)
    }

    /// The supervisor knows about its own watchdog; a timeout the launcher enforced shows as
    /// exit 124 with the launcher's notice at the end of the job's standard error.
    fn with_cage_timeout(&self, mut status: JobStatus) -> JobStatus {
        if let JobState::Finished {
            exit_code: 124,
            timed_out,
            ..
        } = &mut status.state
            && !*timed_out
        {
            let err = Path::new(&self.job_dir(&status.id)).join("err");
            *timed_out = file_tail(&err, 4096).contains(CAGE_TIMEOUT_NOTICE);
        }
        status
    }
}

fn exposure(config: &LocalConfig, workdir: &Path) -> HostExposure {
    let mut paths = vec![ExposedPath {
        host: workdir.display().to_string(),
        target: workdir.display().to_string(),
        read_only: false,
        via: ExposureSource::CagePolicy,
    }];
    for (list, read_only) in [
        (&config.write, false),
        (&config.read, true),
        (&config.exec, true),
    ] {
        for p in list {
            paths.push(ExposedPath {
                host: p.clone(),
                target: p.clone(),
                read_only,
                via: ExposureSource::CagePolicy,
            });
        }
    }
    let mut notes = vec![
        "the default policy also grants reading system directories (/usr, /etc entries programs need)".to_string(),
    ];
    if let Some(p) = &config.policy {
        notes.push(format!(
            "the policy file {} may grant more; the launcher reads it, nestbox-exec does not",
            p.display()
        ));
    }
    HostExposure {
        exposed: true,
        paths,
        notes,
    }
}

fn last_line(text: &str) -> &str {
    text.trim_end().lines().last().unwrap_or_default()
}

fn file_tail(path: &Path, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

impl Backend for LocalBackend {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn prepare(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let out = tokio::process::Command::new(&self.launcher)
                .arg("--version")
                .output()
                .await
                .map_err(|e| ExecError::Unavailable {
                    backend: BackendKind::Local,
                    reason: format!("cannot run the launcher {}: {e}", self.launcher.display()),
                    hint: None,
                })?;
            if !out.status.success() {
                return Err(ExecError::Unavailable {
                    backend: BackendKind::Local,
                    reason: format!(
                        "the launcher {} does not work: {}",
                        self.launcher.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                    hint: None,
                });
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
            let s = self.jobs().poll(job, &self.job_dir(job)).await?;
            Ok(self.with_cage_timeout(s))
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
            self.jobs()
                .read(job, &self.job_dir(job), stream, offset, max)
                .await
        })
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            let s = self.jobs().wait(job, &self.job_dir(job), timeout).await?;
            Ok(self.with_cage_timeout(s))
        })
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move { self.jobs().kill(job, &self.job_dir(job)).await })
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.jobs().forget(job, &self.job_dir(job)).await })
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}
