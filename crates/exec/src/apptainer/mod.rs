//! The Apptainer backend (HPC clusters): commands run with `apptainer exec` (or `singularity
//! exec`) from a SIF image, on this machine.
//!
//! - **Finding the runtime**: `apptainer` first, then `singularity`, on the configured search
//!   path. When neither exists, the backend refuses with where to get Apptainer; it never runs
//!   the command some other way.
//! - **Confinement flags, always**: `--containall` (own PID, IPC and mount namespaces, no host
//!   home, `/tmp` or working directory), `--no-home`, `--cleanenv` (nothing of the caller's
//!   environment), `--drop-caps ALL` and `--no-privs` (no capabilities, even for root).
//! - **Environment**: written to a private env file (mode 600) passed with `--env-file`, which
//!   Apptainer applies *after* `--cleanenv`: forwarding works (Hermes Agent #90298: its
//!   passthrough silently did nothing under `APPTAINER_CLEANENV`) and no value is on the
//!   command line.
//! - **Images**: a `.sif` path is used as it is; a reference (`docker://...`) is built once
//!   into the [SIF cache](cache), which lives in the scratch directory: `/scratch` when it
//!   exists and is writable, else nestbox's state directory.
//! - **Timeout and kill**: SIGTERM to the `apptainer` process, SIGKILL after 2 s. Under
//!   `--containall` the command runs in its own PID namespace, which the kernel empties when
//!   its first process dies, so the whole tree goes with it. Background jobs run under the
//!   job supervisor on this machine, which signals the `apptainer` process group.
//!
//! **Verified here only with a stand-in.** Apptainer cannot be installed on the machines this
//! project is tested on. The tests run a stand-in `apptainer` executable that records its
//! arguments and runs the command on the host: they verify the flags, the lookup order, the
//! env file, the cache (build once, LRU eviction, rebuild after a purge), timeouts and job
//! handling *on nestbox's side*. They do not verify Apptainer's own behaviour (that
//! `--containall` gives a PID namespace whose end takes the tree, or how `--env-file` is
//! parsed by a given Apptainer version).

pub mod cache;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, Cancellation, CommandSpec, Descriptor, ExposedPath,
    ExposureSource, HostExposure, Isolation, JobId, JobStatus, OutputChunk, RunResult, Stream,
};
use crate::config::ApptainerConfig;
use crate::error::{ExecError, Result};
use crate::host::{HostTransport, run_child};
use crate::job::{Jobs, random_token};
use crate::supervisor::shell_quote;
use cache::{Lookup, SifCache};

/// The flags every run gets.
pub const CONFINEMENT_FLAGS: &[&str] = &[
    "--containall",
    "--no-home",
    "--cleanenv",
    "--drop-caps",
    "ALL",
    "--no-privs",
];
const GRACE: Duration = Duration::from_secs(2);
const INSTALL_HINT: &str = "install Apptainer (https://apptainer.org/docs/admin/main/installation.html: packages for Debian/Ubuntu, RHEL/Fedora and SUSE; on clusters usually `module load apptainer`), or set executable to its path";

/// A backend that runs commands in Apptainer containers on this machine.
pub struct ApptainerBackend {
    config: ApptainerConfig,
    ctx: Context,
    executable: PathBuf,
    scratch: PathBuf,
    cache: SifCache,
    image: Option<PathBuf>,
    last_lookup: Option<Lookup>,
    descriptor: Descriptor,
    transport: HostTransport,
}

/// Finds the runtime: the configured executable, else `apptainer` then `singularity` on the
/// search path.
pub fn find_executable(config: &ApptainerConfig) -> Result<PathBuf> {
    if let Some(p) = &config.executable {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(ExecError::Unavailable {
                backend: BackendKind::Apptainer,
                reason: format!("the executable {} does not exist", p.display()),
                hint: Some(INSTALL_HINT.into()),
            })
        };
    }
    let path: OsString = match &config.search_path {
        Some(p) => p.into(),
        None => std::env::var_os("PATH").unwrap_or_default(),
    };
    for name in ["apptainer", "singularity"] {
        if let Some(found) = std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
        {
            return Ok(found);
        }
    }
    Err(ExecError::Unavailable {
        backend: BackendKind::Apptainer,
        reason: "neither apptainer nor singularity is installed (searched PATH)".into(),
        hint: Some(INSTALL_HINT.into()),
    })
}

/// True when `dir` is a directory we can create files in (checked by doing it).
fn writable_dir(dir: &Path) -> bool {
    if !dir.is_dir() {
        return false;
    }
    let probe = dir.join(format!(".nestbox-probe-{}", random_token(4)));
    let ok = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// The scratch directory: the configured one, else `/scratch/nestbox-<uid>` when `/scratch`
/// exists and is writable, else `<state dir>/apptainer`.
pub fn scratch_dir(config: &ApptainerConfig, state_dir: &Path) -> PathBuf {
    if let Some(d) = &config.scratch_dir {
        return d.clone();
    }
    let scratch = Path::new("/scratch");
    if writable_dir(scratch) {
        // SAFETY: geteuid has no failure mode.
        return scratch.join(format!("nestbox-{}", unsafe { libc::geteuid() }));
    }
    state_dir.join("apptainer")
}

fn is_reference(image: &str) -> bool {
    image.contains("://")
}

impl ApptainerBackend {
    /// Builds the backend: finds the runtime and the scratch directory (the image is resolved
    /// in [`prepare`](Backend::prepare)).
    pub(crate) fn new(config: &ApptainerConfig, ctx: Context) -> Result<Self> {
        if config.image.trim().is_empty() {
            return Err(ExecError::InvalidConfig {
                backend: BackendKind::Apptainer,
                reason: "no image: set image to a .sif file or a docker:// reference".into(),
            });
        }
        let executable = find_executable(config)?;
        let scratch = scratch_dir(config, &ctx.state_dir);
        let cache_dir = config
            .cache_dir
            .clone()
            .unwrap_or_else(|| scratch.join("sif"));
        let mut paths = Vec::new();
        for b in &config.binds {
            let mut parts = b.splitn(3, ':');
            let host = parts.next().unwrap_or_default().to_string();
            let target = parts.next().unwrap_or(&host).to_string();
            let read_only = parts
                .next()
                .is_some_and(|o| o.split(',').any(|x| x == "ro"));
            paths.push(ExposedPath {
                host,
                target,
                read_only,
                via: ExposureSource::ApptainerBind,
            });
        }
        let descriptor = Descriptor {
            kind: BackendKind::Apptainer,
            isolation: Isolation::UnprivilegedContainer,
            host_exposure: HostExposure {
                exposed: !paths.is_empty(),
                paths,
                notes: vec![
                    "Apptainer's system configuration (apptainer.conf `bind path`) can add binds nestbox does not see".into(),
                ],
            },
            streams_output: true,
            cancellation: Cancellation::PidNamespace,
            target: format!("{} via {}", config.image, executable.display()),
        };
        Ok(ApptainerBackend {
            cache: SifCache::new(cache_dir, config.cache_max_bytes),
            config: config.clone(),
            ctx,
            executable,
            scratch,
            image: None,
            last_lookup: None,
            descriptor,
            transport: HostTransport {
                kind: BackendKind::Apptainer,
            },
        })
    }

    /// What the last image lookup did (cache hit, build, rebuild after a purge).
    pub fn last_lookup(&self) -> Option<&Lookup> {
        self.last_lookup.as_ref()
    }

    fn image(&self) -> Result<&Path> {
        self.image.as_deref().ok_or_else(|| {
            ExecError::InvalidRequest(
                "the apptainer backend is not prepared: call prepare() (open() does)".into(),
            )
        })
    }

    /// Writes the environment to a private env file: `NAME='value'` lines, which
    /// `--env-file` reads after `--cleanenv` has emptied the environment.
    fn env_file(&self, cmd: &CommandSpec, name: &str) -> Result<Option<PathBuf>> {
        if cmd.env.is_empty() {
            return Ok(None);
        }
        let dir = self.ctx.state_dir.join("apptainer-env");
        std::fs::create_dir_all(&dir)
            .map_err(|e| ExecError::io(format!("creating {}", dir.display()), e))?;
        let path = dir.join(format!("{name}.env"));
        let text: String = cmd
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}\n", shell_quote(v)))
            .collect();
        crate::host::write_private(&path, text.as_bytes())?;
        Ok(Some(path))
    }

    /// `apptainer exec` and its arguments for `cmd`.
    fn exec_argv(&self, cmd: &CommandSpec, env_file: Option<&Path>) -> Result<Vec<OsString>> {
        let mut a: Vec<OsString> = vec![self.executable.clone().into(), "exec".into()];
        a.extend(CONFINEMENT_FLAGS.iter().map(OsString::from));
        if let Some(f) = env_file {
            a.push("--env-file".into());
            a.push(f.into());
        }
        if let Some(w) = cmd.workdir.as_ref().or(self.config.workdir.as_ref()) {
            a.push("--pwd".into());
            a.push(w.into());
        }
        for b in &self.config.binds {
            a.push("--bind".into());
            a.push(b.into());
        }
        a.push(self.image()?.into());
        a.extend(cmd.argv.iter().map(OsString::from));
        Ok(a)
    }

    /// The runtime's own environment: cleared, except what it needs to find itself and its
    /// directories. The command's environment is the env file.
    fn runtime_env(&self, c: &mut tokio::process::Command) {
        c.env_clear();
        for keep in ["PATH", "LANG", "HOME", "USER"] {
            if let Some(v) = std::env::var_os(keep) {
                c.env(keep, v);
            }
        }
        for prefix in ["APPTAINER", "SINGULARITY"] {
            c.env(format!("{prefix}_TMPDIR"), self.scratch.join("tmp"));
            c.env(format!("{prefix}_CACHEDIR"), self.scratch.join("cache"));
        }
    }

    fn job_dir(&self, id: &JobId) -> PathBuf {
        self.ctx.state_dir.join("jobs/apptainer").join(id.as_str())
    }

    fn jobs(&self) -> Jobs<'_> {
        Jobs {
            transport: &self.transport,
            kind: BackendKind::Apptainer,
            grace_secs: GRACE.as_secs(),
        }
    }

    async fn prepare_inner(&mut self) -> Result<()> {
        if self.image.is_some() {
            return Ok(());
        }
        let version = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::process::Command::new(&self.executable)
                .arg("version")
                .stdin(std::process::Stdio::null())
                .output(),
        )
        .await;
        match version {
            Ok(Ok(o)) if o.status.success() => {}
            other => {
                let why = match other {
                    Ok(Ok(o)) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "no answer within 10 s".into(),
                };
                return Err(ExecError::Unavailable {
                    backend: BackendKind::Apptainer,
                    reason: format!("{} version failed: {why}", self.executable.display()),
                    hint: Some(INSTALL_HINT.into()),
                });
            }
        }
        std::fs::create_dir_all(&self.scratch)
            .map_err(|e| ExecError::io(format!("creating {}", self.scratch.display()), e))?;
        let image = if is_reference(&self.config.image) {
            let (path, lookup) = self
                .cache
                .get_or_build(
                    &self.executable,
                    &self.config.image,
                    &self.scratch,
                    self.config.build_timeout,
                )
                .await?;
            self.last_lookup = Some(lookup);
            path
        } else {
            let p = PathBuf::from(&self.config.image);
            if !p.is_file() {
                return Err(ExecError::ImageNotFound {
                    backend: BackendKind::Apptainer,
                    image: self.config.image.clone(),
                    engine: "this machine's filesystem".into(),
                });
            }
            p
        };
        self.image = Some(image);
        Ok(())
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        cmd.validate()?;
        let started_at = SystemTime::now();
        let clock = std::time::Instant::now();
        let env_file = self.env_file(cmd, &random_token(8))?;
        let argv = self.exec_argv(cmd, env_file.as_deref())?;
        let mut child = tokio::process::Command::new(&argv[0]);
        child.args(&argv[1..]);
        self.runtime_env(&mut child);
        let end = run_child(
            BackendKind::Apptainer,
            child,
            cmd.timeout,
            GRACE,
            &self.ctx.output,
            &self.ctx.spill_dir(),
        )
        .await;
        if let Some(f) = env_file {
            let _ = std::fs::remove_file(f);
        }
        let end = end?;
        let err = String::from_utf8_lossy(end.stderr.last_bytes()).into_owned();

        // Apptainer's own words when the program is missing inside the image (exit 255).
        if end.code == Some(255) && err.contains("executable file not found in $PATH") {
            return Err(ExecError::CommandNotFound {
                backend: BackendKind::Apptainer,
                program: cmd.argv[0].clone(),
                detail: err.lines().last().map(|l| l.trim().to_string()),
            });
        }
        Ok(RunResult {
            exit_code: end.code,
            stdout: end.stdout,
            stderr: end.stderr,
            started_at,
            duration: clock.elapsed(),
            timed_out: end.deadline_hit,
            backend: BackendKind::Apptainer,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        cmd.validate()?;
        let id = JobId::parse(&random_token(8))?;
        // Apptainer reads the env file when it starts, some time after spawn returns: the
        // file stays until the job is forgotten.
        let env_file = self.env_file(cmd, &format!("job-{id}"))?;
        let argv: Vec<String> = self
            .exec_argv(cmd, env_file.as_deref())?
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let outer = CommandSpec {
            argv: argv.clone(),
            env: [
                ("APPTAINER_TMPDIR", self.scratch.join("tmp")),
                ("APPTAINER_CACHEDIR", self.scratch.join("cache")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string_lossy().into_owned()))
            .collect(),
            workdir: None,
            timeout: cmd.timeout,
        };
        let dir = self.job_dir(&id).to_string_lossy().into_owned();
        let started = self.jobs().spawn(&dir, &outer, &argv).await;
        if let (Some(f), Err(_)) = (env_file, &started) {
            let _ = std::fs::remove_file(f);
        }
        started?;
        Ok(id)
    }

    fn job_env_path(&self, id: &JobId) -> PathBuf {
        self.ctx
            .state_dir
            .join("apptainer-env")
            .join(format!("job-{id}.env"))
    }
}

impl Backend for ApptainerBackend {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn prepare(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.prepare_inner())
    }

    fn run<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<RunResult>> {
        Box::pin(self.run_inner(cmd))
    }

    fn spawn<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<JobId>> {
        Box::pin(self.spawn_inner(cmd))
    }

    fn poll<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            self.jobs()
                .poll(job, &self.job_dir(job).to_string_lossy())
                .await
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
                .read(
                    job,
                    &self.job_dir(job).to_string_lossy(),
                    stream,
                    offset,
                    max,
                )
                .await
        })
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            self.jobs()
                .wait(job, &self.job_dir(job).to_string_lossy(), timeout)
                .await
        })
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(async move {
            self.jobs()
                .kill(job, &self.job_dir(job).to_string_lossy())
                .await
        })
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.jobs()
                .forget(job, &self.job_dir(job).to_string_lossy())
                .await?;
            let _ = std::fs::remove_file(self.job_env_path(job));
            Ok(())
        })
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}
