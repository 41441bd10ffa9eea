//! The [`Backend`] trait, what a backend declares about itself ([`Descriptor`]), and the types
//! every backend takes and returns: [`CommandSpec`] in, [`RunResult`], [`JobId`],
//! [`JobStatus`] and [`OutputChunk`] out. They are the same for every backend, so an agent
//! reads one shape whatever its configuration names.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{ExecError, Result};
use crate::output::CapturedOutput;

/// A boxed future, so that [`Backend`] can be used as `dyn Backend`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which backend. The names are the ones configurations and the command line use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The cage on this machine (`nestbox run`).
    Local,
    /// A container, through the Docker Engine API (dockerd or Podman).
    Docker,
    /// Another machine, through the system `ssh`.
    Ssh,
    /// An Apptainer (or Singularity) container on this machine.
    Apptainer,
    /// A job on a Slurm cluster, submitted with the cluster's own client tools.
    Slurm,
    /// A Modal sandbox, over Modal's gRPC API.
    Modal,
    /// A Daytona sandbox, over Daytona's REST API.
    Daytona,
}

impl BackendKind {
    /// Every backend, in the order the documentation lists them.
    pub const ALL: [BackendKind; 7] = [
        BackendKind::Local,
        BackendKind::Docker,
        BackendKind::Ssh,
        BackendKind::Apptainer,
        BackendKind::Slurm,
        BackendKind::Modal,
        BackendKind::Daytona,
    ];

    /// The backend's name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Local => "local",
            BackendKind::Docker => "docker",
            BackendKind::Ssh => "ssh",
            BackendKind::Apptainer => "apptainer",
            BackendKind::Slurm => "slurm",
            BackendKind::Modal => "modal",
            BackendKind::Daytona => "daytona",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = ExecError;

    /// Parses a backend name; an unknown name is [`ExecError::UnknownBackend`], never a default.
    fn from_str(s: &str) -> Result<Self> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| ExecError::UnknownBackend { name: s.into() })
    }
}

/// How strongly a backend separates the command from the machine it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// The cage: Landlock and seccomp on this machine's kernel, in a clean environment. Files
    /// the policy lists are the host's own.
    Cage,
    /// A container: its own namespaces (mount, PID, network, IPC, UTS), cgroup limits, every
    /// capability dropped, no new privileges. Same kernel as the host.
    Container,
    /// An Apptainer container: its own mount and PID namespaces, clean environment, no home,
    /// capabilities dropped. Same kernel, the caller's own user.
    UnprivilegedContainer,
    /// No sandbox: a login on another machine. Whatever that account can do, the command can.
    RemoteAccount,
    /// A batch job on a cluster's compute node, outside the cage (nestbox is not used there):
    /// whatever the cluster account can do, the command can, within the resources the
    /// scheduler granted.
    SchedulerJob,
    /// A sandbox on a provider's machines (Modal: a gVisor container; Daytona: a container),
    /// with its own filesystem and no path of this machine. How strong it is is the
    /// provider's claim, not something nestbox can check.
    RemoteSandbox,
}

/// Where the command's files come from: which host paths it can see, computed from the
/// *final* specification (for Docker: the created container, its mounts and the volumes
/// behind them), not from what the configuration meant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostExposure {
    /// True when any host path is reachable from inside.
    pub exposed: bool,
    /// Every host path found, with how it got in.
    pub paths: Vec<ExposedPath>,
    /// What could not be checked, if anything (a reason to treat `exposed` as a lower bound).
    pub notes: Vec<String>,
}

/// One host path reachable from inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExposedPath {
    /// The path on the host.
    pub host: String,
    /// Where it appears inside (or `*` when the whole account is reachable).
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// How it got in.
    pub via: ExposureSource,
}

/// How a host path became reachable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ExposureSource {
    /// A `host:container` bind in the container's `Binds`.
    Bind,
    /// A `Mounts` entry of type bind.
    BindMount,
    /// A named volume whose driver options bind a host path (`local` driver, `o=bind`,
    /// `device=PATH`): the case a prefix test on the volume spec misses.
    NamedVolume {
        /// The volume's name.
        name: String,
    },
    /// Mounts inherited from another container (`VolumesFrom`).
    VolumesFrom {
        /// The container they come from.
        container: String,
    },
    /// The cage's policy grants it (the working directory and the `read`/`write`/`exec` lists).
    CagePolicy,
    /// An Apptainer `--bind`.
    ApptainerBind,
    /// The whole remote account (SSH).
    RemoteAccount,
}

/// How a kill or a timeout reaches the command's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cancellation {
    /// `nestbox run`'s launcher, a subreaper, signals every process of the step (those that
    /// left its process group or session too), SIGTERM then SIGKILL, and kills what is left
    /// when the step's main process ends.
    CageSupervisor,
    /// A supervisor script inside the sandbox signals the job's process group and every
    /// process that carries the job's marker variable (so `setsid` and double forks are
    /// caught), SIGTERM then SIGKILL. It runs inside the sandbox, so killing the local client
    /// is never what ends the command.
    SandboxSupervisor,
    /// The container's PID namespace ends with its first process, taking every process in it
    /// (Apptainer `--containall` gives each run its own PID namespace).
    PidNamespace,
    /// The scheduler ends the job: `scancel` makes Slurm signal every process it tracks for
    /// the job (with proctrack/cgroup, its whole cgroup), and the job script, on that SIGTERM,
    /// kills its own tree (process group and marked processes) before Slurm's SIGKILL.
    Scheduler,
}

/// What a backend declares about itself. Computed once the backend is prepared, from its final
/// specification; an agent or the guard reads it to decide how much to trust the backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Descriptor {
    /// Which backend.
    pub kind: BackendKind,
    /// How strongly the command is separated from the machine it runs on.
    pub isolation: Isolation,
    /// Which host paths the command can reach.
    pub host_exposure: HostExposure,
    /// True when output can be read while the command runs (always, for background jobs).
    pub streams_output: bool,
    /// How timeouts and kills reach the command's processes.
    pub cancellation: Cancellation,
    /// Where the command runs, for people: a container id, `user@host:port`, an image.
    pub target: String,
}

impl Descriptor {
    /// A hosted sandbox's (Modal, Daytona): nothing of this machine is mounted, and the
    /// supervisor inside the sandbox ends what a timeout or kill reaches.
    pub(crate) fn remote_sandbox(
        kind: BackendKind,
        provider: &str,
        network_blocked: bool,
        target: String,
    ) -> Descriptor {
        let network = if network_blocked { "blocked" } else { "open" };
        Descriptor {
            kind,
            isolation: Isolation::RemoteSandbox,
            host_exposure: HostExposure {
                exposed: false,
                paths: Vec::new(),
                notes: vec![format!(
                    "a {provider} sandbox: no path of this machine is mounted; network {network}"
                )],
            },
            streams_output: true,
            cancellation: Cancellation::SandboxSupervisor,
            target,
        }
    }
}

/// One command to run. The same request works on every backend.
///
/// The command is an argument vector: nothing is parsed by a shell unless you ask for one
/// (`["sh", "-c", "make test"]`). Environment variables are forwarded explicitly, by name and
/// value, the same way for every backend; no value is ever placed on a command line (see the
/// backends for how each delivers them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Variables to set in the command's environment, name to value.
    pub env: BTreeMap<String, String>,
    /// The working directory, as a path inside the sandbox. `None`: the backend's default.
    pub workdir: Option<String>,
    /// End the whole process tree after this long. `None`: no limit.
    pub timeout: Option<Duration>,
}

impl CommandSpec {
    /// A command with no environment, the default working directory and no timeout.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        CommandSpec {
            argv: argv.into_iter().map(Into::into).collect(),
            ..CommandSpec::default()
        }
    }

    /// Sets one environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Forwards the named variable from this process's environment (an error when it is not
    /// set: forwarding is explicit, so a missing variable is a mistake, not a default).
    pub fn forward_env(mut self, name: &str) -> Result<Self> {
        let value = std::env::var(name).map_err(|_| {
            ExecError::InvalidRequest(format!(
                "cannot forward {name}: it is not set (or not UTF-8) in this environment"
            ))
        })?;
        self.env.insert(name.into(), value);
        Ok(self)
    }

    /// Sets the working directory.
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Checks what every backend relies on: a non-empty command, environment names that are
    /// portable shell names, no NUL bytes anywhere.
    pub fn validate(&self) -> Result<()> {
        let Some(program) = self.argv.first() else {
            return Err(ExecError::InvalidRequest("the command is empty".into()));
        };
        if program.is_empty() {
            return Err(ExecError::InvalidRequest(
                "the program name is empty".into(),
            ));
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(ExecError::InvalidRequest(
                "a command argument contains a NUL byte".into(),
            ));
        }
        for (name, value) in &self.env {
            check_env_name(name)?;
            if value.contains('\0') {
                return Err(ExecError::InvalidRequest(format!(
                    "the value of {name} contains a NUL byte"
                )));
            }
        }
        if let Some(dir) = &self.workdir
            && (dir.is_empty() || dir.contains('\0'))
        {
            return Err(ExecError::InvalidRequest(
                "the working directory is empty or contains a NUL byte".into(),
            ));
        }
        Ok(())
    }
}

/// Checks that `name` is a portable environment variable name: a letter or underscore, then
/// letters, digits and underscores.
pub fn check_env_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ExecError::InvalidRequest(format!(
            "`{name}` is not a valid environment variable name (letters, digits and _, not starting with a digit)"
        )))
    }
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunResult {
    /// The exit code in the shell's convention: the command's own, or 128+N when signal N
    /// ended it. `None` when the backend could not learn it. After a timeout it is whatever
    /// the killed command reported; [`timed_out`](Self::timed_out) is the authority.
    pub exit_code: Option<i32>,
    /// Standard output, bounded (head and tail kept, the whole stream in a file when larger).
    pub stdout: CapturedOutput,
    /// Standard error, kept apart from standard output, bounded the same way.
    pub stderr: CapturedOutput,
    /// When the backend was asked to start it.
    #[serde(with = "unix_seconds")]
    pub started_at: SystemTime,
    /// Wall-clock time from the request to the end of the output (`duration_ms` in JSON).
    #[serde(with = "duration_millis", rename = "duration_ms")]
    pub duration: Duration,
    /// True when the timeout ended it (its whole process tree was killed).
    pub timed_out: bool,
    /// Which backend ran it.
    pub backend: BackendKind,
}

impl RunResult {
    /// True when the command exited 0 and did not time out.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// Names a background job. Opaque to callers; valid across processes (a job spawned by one
/// `nestbox exec` can be polled by the next, given the same configuration).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// Parses a job id as printed by [`spawn`](Backend::spawn). Only letters, digits, `.`,
    /// `_` and `-` appear in job ids, so they are safe in paths and shell words.
    pub fn parse(s: &str) -> Result<JobId> {
        let ok = !s.is_empty()
            && s.len() <= 128
            && !s.starts_with(['.', '-'])
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if ok {
            Ok(JobId(s.to_string()))
        } else {
            Err(ExecError::InvalidRequest(format!(
                "`{s}` is not a job id (letters, digits, `.`, `_`, `-`)"
            )))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a background job stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum JobState {
    /// Still running.
    Running,
    /// Finished. `timed_out` and `killed` tell whether nestbox ended it.
    Finished {
        /// Exit code in the shell's convention (128+N for signal N).
        exit_code: i32,
        /// The job's timeout ended it.
        timed_out: bool,
        /// A kill request ended it.
        killed: bool,
    },
    /// Its supervisor is gone without recording an end (the sandbox was restarted or
    /// removed). Its output so far is still readable when the files survived.
    Lost,
}

/// A background job's state and how much output it has produced so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    /// The job.
    pub id: JobId,
    /// Running, finished or lost.
    #[serde(flatten)]
    pub state: JobState,
    /// Bytes of standard output so far.
    pub stdout_bytes: u64,
    /// Bytes of standard error so far.
    pub stderr_bytes: u64,
    /// When it started, seconds since the Unix epoch (the sandbox's clock).
    pub started_at: Option<u64>,
    /// When it finished, seconds since the Unix epoch (the sandbox's clock).
    pub finished_at: Option<u64>,
}

impl JobStatus {
    /// True when the job is no longer running (finished or lost).
    pub fn is_done(&self) -> bool {
        !matches!(self.state, JobState::Running)
    }
}

/// Standard output or standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// The stream's name (also the job file's name: `out` or `err`).
    pub fn file_name(self) -> &'static str {
        match self {
            Stream::Stdout => "out",
            Stream::Stderr => "err",
        }
    }
}

impl std::str::FromStr for Stream {
    type Err = ExecError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "stdout" | "out" => Ok(Stream::Stdout),
            "stderr" | "err" => Ok(Stream::Stderr),
            _ => Err(ExecError::InvalidRequest(format!(
                "`{s}` is not a stream (stdout or stderr)"
            ))),
        }
    }
}

/// A piece of a job's output, read from an offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputChunk {
    /// Which stream.
    pub stream: Stream,
    /// Where this piece starts in the stream.
    pub offset: u64,
    /// The bytes.
    #[serde(serialize_with = "crate::output::serialize_lossy")]
    pub data: Vec<u8>,
    /// Where the next read should start.
    pub next_offset: u64,
    /// True when the job has finished and nothing follows `next_offset`.
    pub complete: bool,
}

impl OutputChunk {
    /// `data` read from `stream` at `offset`, given where the job stood when it was read: the
    /// stream is complete once the job is done and nothing lies beyond the data.
    pub(crate) fn read_at(status: &JobStatus, stream: Stream, offset: u64, data: Vec<u8>) -> Self {
        let size = match stream {
            Stream::Stdout => status.stdout_bytes,
            Stream::Stderr => status.stderr_bytes,
        };
        let next_offset = offset + data.len() as u64;
        OutputChunk {
            stream,
            offset,
            complete: status.is_done() && next_offset >= size,
            next_offset,
            data,
        }
    }
}

/// One way to run commands. Every backend implements all of it; what differs is declared in
/// its [`Descriptor`], never hidden.
///
/// The methods return boxed futures so that `dyn Backend` works; the backends are written with
/// ordinary `async fn`s behind them.
pub trait Backend: Send + Sync {
    /// What this backend is, computed from its final specification.
    fn descriptor(&self) -> &Descriptor;

    /// Makes the backend ready: connects, finds or creates the container, checks the host
    /// key, builds the image. [`open`](crate::open) calls it; calling it again is cheap.
    fn prepare(&mut self) -> BoxFuture<'_, Result<()>>;

    /// Runs a command in the foreground and returns how it ended, with its output bounded.
    /// When the timeout passes, the command's whole process tree inside the sandbox is
    /// killed and the result says `timed_out`.
    fn run<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<RunResult>>;

    /// Starts a command in the background and returns its job id at once. Its output goes to
    /// files inside the sandbox; its timeout (if any) is enforced inside the sandbox too, so
    /// it holds even when the caller goes away.
    fn spawn<'a>(&'a self, cmd: &'a CommandSpec) -> BoxFuture<'a, Result<JobId>>;

    /// Where a job stands, without waiting.
    fn poll<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>>;

    /// Reads up to `max` bytes (at most [`MAX_READ`](crate::job::MAX_READ)) of a job's stream
    /// from `offset`; tail a job by reading again from the previous `next_offset`.
    fn read<'a>(
        &'a self,
        job: &'a JobId,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<OutputChunk>>;

    /// Waits until the job is done, or `timeout` passes (then returns it still running).
    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>>;

    /// Kills the job's whole process tree inside the sandbox (SIGTERM, then SIGKILL) and
    /// returns its final status.
    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>>;

    /// Deletes a finished job's files (a running job is killed first).
    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>>;

    /// Releases what the backend holds (lease, connection). Jobs keep running; containers
    /// kept for reuse stay until their lease expires.
    fn close(&mut self) -> BoxFuture<'_, Result<()>>;
}

/// Where full outputs and other state go, for the backends that keep things on this machine.
pub(crate) fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("nestbox");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/state/nestbox");
    }
    std::env::temp_dir().join(format!("nestbox-state-{}", unsafe { libc::geteuid() }))
}

mod unix_seconds {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let secs = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        s.serialize_f64(secs)
    }
}

mod duration_millis {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_backend_names_are_errors_not_defaults() {
        assert!(matches!(
            "podman".parse::<BackendKind>(),
            Err(ExecError::UnknownBackend { name }) if name == "podman"
        ));
        assert_eq!("ssh".parse::<BackendKind>().unwrap(), BackendKind::Ssh);
    }

    #[test]
    fn job_ids_refuse_path_and_shell_characters() {
        assert!(JobId::parse("abc-12.x_y").is_ok());
        for bad in ["", "../x", "a/b", "a b", "$(x)", "-rf", ".hidden", "a;b"] {
            assert!(JobId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn command_validation_catches_bad_env_names_and_empty_commands() {
        assert!(CommandSpec::new(Vec::<String>::new()).validate().is_err());
        assert!(
            CommandSpec::new(["true"])
                .env("1X", "v")
                .validate()
                .is_err()
        );
        assert!(
            CommandSpec::new(["true"])
                .env("A-B", "v")
                .validate()
                .is_err()
        );
        assert!(
            CommandSpec::new(["true"])
                .env("_OK_1", "any 'value' $x")
                .validate()
                .is_ok()
        );
    }
}
