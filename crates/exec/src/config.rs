//! The one typed configuration that selects a backend, and [`open`], which builds exactly that
//! backend or fails. There is no default backend to fall back to and no second choice: a
//! configuration that says `docker` runs on Docker or does not run.
//!
//! ```toml
//! [backend]
//! kind = "docker"             # local | docker | ssh | apptainer | slurm | modal | daytona
//! image = "localhost/busybox"
//! memory = "512MiB"
//!
//! [output]
//! head_bytes = 16384
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::backend::{Backend, BackendKind};
use crate::error::{ExecError, Result};
use crate::output::OutputLimits;

/// Everything `open` needs: which backend and how, plus the settings all backends share.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// The backend and its settings.
    pub backend: BackendConfig,
    /// How much output to keep in memory and where to spill the rest.
    #[serde(default)]
    pub output: OutputLimits,
    /// Where nestbox keeps state on this machine (spilled output, local jobs, container
    /// leases, the SIF cache when there is no `/scratch`). Default:
    /// `$XDG_STATE_HOME/nestbox` or `~/.local/state/nestbox`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

impl ExecConfig {
    /// A configuration for `backend` with default output limits and state directory.
    pub fn new(backend: BackendConfig) -> Self {
        ExecConfig {
            backend,
            output: OutputLimits::default(),
            state_dir: None,
        }
    }

    /// Parses a TOML configuration. An unknown `kind` is [`ExecError::UnknownBackend`]; any
    /// other mistake is [`ExecError::InvalidConfig`] with the parser's message.
    pub fn from_toml(text: &str) -> Result<Self> {
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            ExecError::InvalidRequest(format!("the exec configuration is not valid TOML: {e}"))
        })?;
        let kind = table
            .get("backend")
            .and_then(|b| b.get("kind"))
            .and_then(|k| k.as_str())
            .ok_or_else(|| {
                ExecError::InvalidRequest(
                    "the exec configuration needs [backend] kind = \"local\" | \"docker\" | \"ssh\" | \"apptainer\" | \"slurm\" | \"modal\" | \"daytona\"".into(),
                )
            })?;
        let kind: BackendKind = kind.parse()?;
        toml::from_str(text).map_err(|e| ExecError::InvalidConfig {
            backend: kind,
            reason: e.to_string(),
        })
    }

    /// Reads and parses a TOML configuration file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ExecError::io(format!("reading {}", path.display()), e))?;
        Self::from_toml(&text)
    }

    /// The state directory, defaulted.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(crate::backend::default_state_dir)
    }
}

/// Which backend, with its settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendConfig {
    /// The cage on this machine.
    Local(LocalConfig),
    /// A container through the Docker Engine API (dockerd or Podman).
    Docker(DockerConfig),
    /// Another machine through the system `ssh`.
    Ssh(SshConfig),
    /// An Apptainer or Singularity container on this machine.
    Apptainer(ApptainerConfig),
    /// A job on a Slurm cluster.
    Slurm(SlurmConfig),
    /// A Modal sandbox.
    Modal(ModalConfig),
    /// A Daytona sandbox.
    Daytona(DaytonaConfig),
}

impl BackendConfig {
    /// Which backend this configures.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendConfig::Local(_) => BackendKind::Local,
            BackendConfig::Docker(_) => BackendKind::Docker,
            BackendConfig::Ssh(_) => BackendKind::Ssh,
            BackendConfig::Apptainer(_) => BackendKind::Apptainer,
            BackendConfig::Slurm(_) => BackendKind::Slurm,
            BackendConfig::Modal(_) => BackendKind::Modal,
            BackendConfig::Daytona(_) => BackendKind::Daytona,
        }
    }
}

/// The local backend: each command is a caged step run by the `nestbox run` launcher.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// The `nestbox` executable whose `run` command is the launcher. Default: this program
    /// when it is `nestbox`, else `nestbox` on `PATH`.
    pub launcher: Option<PathBuf>,
    /// A policy file passed to the launcher (`--policy`); nestbox-exec never reads it itself.
    pub policy: Option<PathBuf>,
    /// Extra readable paths (`--read`).
    pub read: Vec<String>,
    /// Extra writable paths (`--write`).
    pub write: Vec<String>,
    /// Extra executable trees (`--exec`).
    pub exec: Vec<String>,
    /// The default working directory (writable by the cage's default policy). Default: the
    /// current directory.
    pub workdir: Option<PathBuf>,
    /// Run even when the kernel cannot enforce everything (`--best-effort`).
    pub best_effort: bool,
}

/// The Docker backend: commands run in a long-lived, hardened container through the Engine
/// API. Works with dockerd and with Podman's Docker-compatible service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    /// The engine's socket (`unix:///path` or a path). Default: `DOCKER_HOST` when it names a
    /// unix socket, else `/var/run/docker.sock`.
    pub socket: Option<String>,
    /// The image. Never pulled: it must be in the engine already.
    pub image: String,
    /// The user commands run as: `root`, a name, `uid` or `uid:gid`. Default: the image's
    /// own user when it is not root, else `65534:65534` (nobody).
    pub user: Option<String>,
    /// The default working directory inside the container. Default: the image's, else `/`.
    pub workdir: Option<String>,
    /// Memory limit (`512MiB`, `2GiB`). Default: none.
    #[serde(deserialize_with = "de_size_opt")]
    pub memory: Option<u64>,
    /// CPU limit in CPUs (`1.5`). Default: none.
    pub cpus: Option<f64>,
    /// Most processes the container may hold.
    pub pids_limit: i64,
    /// Mount the image's root filesystem read-only (job files live on a private tmpfs).
    pub read_only_rootfs: bool,
    /// Mounts in `docker -v` form: `SOURCE:TARGET[:ro]`. A SOURCE starting with `/`, `~`,
    /// `./`, `../` or a drive letter is a host path; anything else names a volume (whose
    /// driver options are inspected too: see the host exposure rules).
    pub mounts: Vec<String>,
    /// Hosts the container may reach through its relay (relay allowlist syntax: `host`,
    /// `*.suffix`, an IP or CIDR, optional `:port`). Empty: no network at all
    /// (`NetworkMode: none` either way; the relay is the only way out).
    pub allow_hosts: Vec<String>,
    /// The `nestbox` executable that serves as the container's relay. Default: this program
    /// when it is `nestbox`, else `nestbox` on `PATH`.
    pub relay_program: Option<PathBuf>,
    /// Keep the container for the next command (found again by its labels) until it has been
    /// idle for `idle_ttl`. False: one container per backend, removed on close.
    pub reuse: bool,
    /// How long a kept container may stay idle before the reaper removes it.
    #[serde(deserialize_with = "de_duration")]
    pub idle_ttl: Duration,
    /// Size of the private tmpfs at `/run/nestbox` that holds job files (background output).
    #[serde(deserialize_with = "de_size")]
    pub job_tmpfs_size: u64,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            socket: None,
            image: String::new(),
            user: None,
            workdir: None,
            memory: None,
            cpus: None,
            pids_limit: 1024,
            read_only_rootfs: false,
            mounts: Vec::new(),
            allow_hosts: Vec::new(),
            relay_program: None,
            reuse: true,
            idle_ttl: Duration::from_secs(600),
            job_tmpfs_size: 256 << 20,
        }
    }
}

/// How the SSH backend treats the server's host key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeyPolicy {
    /// The key must already be in the known-hosts file (`StrictHostKeyChecking=yes`).
    #[default]
    Strict,
    /// Trust and record a host seen for the first time; refuse a changed key
    /// (`StrictHostKeyChecking=accept-new`). Trusts whoever answers first.
    AcceptNew,
}

/// The SSH backend: commands run on another machine through the system `ssh`, over one
/// multiplexed connection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SshConfig {
    /// Host name or address.
    pub host: String,
    /// Login name. Default: ssh's own default.
    pub user: Option<String>,
    /// Port. Default: ssh's own default.
    pub port: Option<u16>,
    /// Private key file (`-i`, with `IdentitiesOnly=yes`).
    pub identity: Option<PathBuf>,
    /// Known-hosts file. Default: ssh's own (`~/.ssh/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// Host key policy; always explicit on the command line.
    pub host_key_policy: HostKeyPolicy,
    /// How long to wait for the connection.
    #[serde(deserialize_with = "de_duration")]
    pub connect_timeout: Duration,
    /// How long the shared connection stays open after its last use.
    #[serde(deserialize_with = "de_duration")]
    pub control_persist: Duration,
    /// Private directory (mode 700) for the connection socket. Default:
    /// `/tmp/nestbox-ssh-<uid>`, short enough for a socket path.
    pub control_dir: Option<PathBuf>,
    /// Where jobs live on the remote host. Default: `~/.cache/nestbox/jobs`.
    pub jobs_dir: Option<String>,
    /// Default working directory on the remote host. Default: the login directory.
    pub workdir: Option<String>,
    /// The `ssh` program. Default: `ssh` on `PATH`.
    pub ssh_program: Option<PathBuf>,
    /// How long a foreground run keeps trying to re-attach after the connection drops.
    #[serde(deserialize_with = "de_duration")]
    pub reattach_for: Duration,
}

impl Default for SshConfig {
    fn default() -> Self {
        SshConfig {
            host: String::new(),
            user: None,
            port: None,
            identity: None,
            known_hosts: None,
            host_key_policy: HostKeyPolicy::Strict,
            connect_timeout: Duration::from_secs(10),
            control_persist: Duration::from_secs(300),
            control_dir: None,
            jobs_dir: None,
            workdir: None,
            ssh_program: None,
            reattach_for: Duration::from_secs(60),
        }
    }
}

/// The Apptainer backend: commands run in an Apptainer (or Singularity) container built from a
/// SIF file, on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApptainerConfig {
    /// A `.sif` file, or an image reference (`docker://...`, `library://...`, `oras://...`)
    /// built once into the SIF cache.
    pub image: String,
    /// The executable. Default: `apptainer`, then `singularity`, on `search_path`.
    pub executable: Option<PathBuf>,
    /// The directories searched for the executable. Default: `PATH`.
    pub search_path: Option<String>,
    /// Host paths to bind (`SOURCE[:TARGET[:ro]]`); they count as host exposure.
    pub binds: Vec<String>,
    /// Scratch directory. Default: `/scratch` when it exists and is writable, else the state
    /// directory.
    pub scratch_dir: Option<PathBuf>,
    /// SIF cache directory. Default: `<scratch>/nestbox-sif-<uid>`.
    pub cache_dir: Option<PathBuf>,
    /// Largest total size of the SIF cache; least recently used images go first.
    #[serde(deserialize_with = "de_size")]
    pub cache_max_bytes: u64,
    /// Default working directory inside the container.
    pub workdir: Option<String>,
    /// Longest an image build may take.
    #[serde(deserialize_with = "de_duration")]
    pub build_timeout: Duration,
}

impl Default for ApptainerConfig {
    fn default() -> Self {
        ApptainerConfig {
            image: String::new(),
            executable: None,
            search_path: None,
            binds: Vec::new(),
            scratch_dir: None,
            cache_dir: None,
            cache_max_bytes: 20 << 30,
            workdir: None,
            build_timeout: Duration::from_secs(600),
        }
    }
}

/// The Slurm backend: each command is a job on a Slurm cluster, submitted with the cluster's
/// own client tools (`srun` for foreground runs, `sbatch` for background jobs), and run on the
/// compute node under `nestbox run` (the cage) unless `cage = false`.
///
/// The job's files (output, status) live in `jobs_dir`, which must be one directory seen by
/// both this machine and the compute nodes (a shared filesystem, as a cluster's home or
/// scratch is): this side reads output from offsets there, the job writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// Partition (`--partition`). Default: the cluster's default partition.
    pub partition: Option<String>,
    /// Account to charge (`--account`).
    pub account: Option<String>,
    /// CPUs for the command (`--cpus-per-task`). Default: the cluster's default (one).
    pub cpus: Option<u32>,
    /// Memory for the job (`--mem`, rounded up to MiB), e.g. `2GiB`. Default: the cluster's.
    #[serde(deserialize_with = "de_size_opt")]
    pub memory: Option<u64>,
    /// Slurm's own time limit for a job (`--time`, whole minutes, rounded up). A command with a
    /// timeout gets that timeout plus a margin instead (the job script enforces the timeout to
    /// the second; Slurm's limit is the backstop). Default: the partition's limit.
    #[serde(deserialize_with = "de_duration_opt")]
    pub time_limit: Option<Duration>,
    /// Working directory on the compute node (`--chdir`). Default: this process's current
    /// directory.
    pub workdir: Option<String>,
    /// The shared directory for job files. Default: `~/.cache/nestbox/slurm-jobs`.
    pub jobs_dir: Option<PathBuf>,
    /// Run the command in the cage (`nestbox run`) on the compute node. When true and nestbox
    /// is not installed there, the job refuses to run (exit 125, with the node's name); it
    /// never runs the command uncaged instead.
    pub cage: bool,
    /// The `nestbox` executable on the compute nodes. Default: `nestbox` on the node's `PATH`.
    pub launcher: Option<String>,
    /// A policy file on the compute nodes, passed to `nestbox run --policy`.
    pub policy: Option<String>,
    /// `--best-effort` for the cage on the compute node.
    pub best_effort: bool,
    /// The cluster's configuration file, exported as `SLURM_CONF` to the client tools.
    /// Default: the tools' own lookup (`SLURM_CONF`, `/etc/slurm/slurm.conf`, DNS SRV).
    pub slurm_conf: Option<PathBuf>,
    /// Where the client tools (`sbatch`, `srun`, `squeue`, `scontrol`, `scancel`, `sacct`) are.
    /// Default: `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// How often a foreground run or `wait` looks at the job's files.
    #[serde(deserialize_with = "de_duration")]
    pub poll_interval: Duration,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            partition: None,
            account: None,
            cpus: None,
            memory: None,
            time_limit: None,
            workdir: None,
            jobs_dir: None,
            cage: true,
            launcher: None,
            policy: None,
            best_effort: false,
            slurm_conf: None,
            bin_dir: None,
            poll_interval: Duration::from_millis(50),
        }
    }
}

/// Where the Modal backend's credentials come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModalCredentials {
    /// Direct when the user's own credentials exist (`MODAL_TOKEN_ID` and
    /// `MODAL_TOKEN_SECRET`, or the active profile of `~/.modal.toml`), else managed when
    /// `[backend.managed]` is configured, else an error listing what was checked.
    #[default]
    Auto,
    /// Only the user's own credentials: the environment's pair wins, else the active profile.
    /// Never the gateway.
    Direct,
    /// Only the credential gateway: this process holds placeholders, the gateway swaps in the
    /// secrets. Never the user's own credentials, even when they exist.
    Managed,
}

/// Managed Modal credentials: a gateway in front of Modal's API holds the real token pair and
/// swaps it in for the placeholders this process sends (nestbox's gateway does this with
/// `nestbox:resolve:env:NAME` placeholders), so the agent never holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModalManaged {
    /// The gateway's endpoint for Modal's API (`https://...`; `http://` only on loopback).
    pub server_url: String,
    /// What is sent as the token id. Default: `nestbox:resolve:env:MODAL_TOKEN_ID`.
    #[serde(default = "default_modal_id_placeholder")]
    pub token_id: String,
    /// What is sent as the token secret. Default: `nestbox:resolve:env:MODAL_TOKEN_SECRET`.
    #[serde(default = "default_modal_secret_placeholder")]
    pub token_secret: String,
    /// A PEM file with the gateway's CA certificate (when it intercepts TLS).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

fn default_modal_id_placeholder() -> String {
    "nestbox:resolve:env:MODAL_TOKEN_ID".into()
}

fn default_modal_secret_placeholder() -> String {
    "nestbox:resolve:env:MODAL_TOKEN_SECRET".into()
}

/// The Modal backend: commands run in a Modal sandbox, over Modal's gRPC API (the control
/// plane for the sandbox, the sandbox's command router for each command).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModalConfig {
    /// Which credentials: auto, direct or managed (see [`ModalCredentials`]).
    pub credentials: ModalCredentials,
    /// The credential gateway, for managed credentials.
    pub managed: Option<ModalManaged>,
    /// The API server for direct credentials. Default: `MODAL_SERVER_URL`, else the profile's
    /// `server_url`, else `https://api.modal.com`. `http://` is refused except on loopback.
    pub server_url: Option<String>,
    /// The profile in the config file. Default: `MODAL_PROFILE`, else the profile marked
    /// `active = true`, else `default`.
    pub profile: Option<String>,
    /// The config file. Default: `MODAL_CONFIG_PATH`, else `~/.modal.toml`.
    pub config_path: Option<PathBuf>,
    /// The Modal environment. Default: `MODAL_ENVIRONMENT`, else the profile's, else the
    /// server's default.
    pub environment: Option<String>,
    /// The app the sandboxes belong to (created when missing).
    pub app_name: String,
    /// The image: a registry reference (`python:3.12-slim`, built by Modal as `FROM <ref>`) or
    /// the id of an image Modal already has (`im-...`). It needs `/bin/sh`.
    pub image: String,
    /// CPUs (`0.5`, `2`).
    pub cpu: Option<f64>,
    /// Memory, e.g. `2GiB`.
    #[serde(deserialize_with = "de_size_opt")]
    pub memory: Option<u64>,
    /// Ephemeral disk, e.g. `10GiB`.
    #[serde(deserialize_with = "de_size_opt")]
    pub disk: Option<u64>,
    /// Block all network access from the sandbox.
    pub block_network: bool,
    /// The sandbox's own lifetime limit: Modal terminates it after this long whatever runs.
    #[serde(deserialize_with = "de_duration")]
    pub sandbox_timeout: Duration,
    /// Modal terminates the sandbox after this long without activity.
    #[serde(deserialize_with = "de_duration_opt")]
    pub idle_timeout: Option<Duration>,
    /// Default working directory inside the sandbox.
    pub workdir: Option<String>,
    /// How long to wait for the API to answer a connection.
    #[serde(deserialize_with = "de_duration")]
    pub connect_timeout: Duration,
    /// How long image builds and sandbox start-up may take.
    #[serde(deserialize_with = "de_duration")]
    pub start_timeout: Duration,
}

impl Default for ModalConfig {
    fn default() -> Self {
        ModalConfig {
            credentials: ModalCredentials::Auto,
            managed: None,
            server_url: None,
            profile: None,
            config_path: None,
            environment: None,
            app_name: "nestbox".into(),
            image: String::new(),
            cpu: None,
            memory: None,
            disk: None,
            block_network: true,
            sandbox_timeout: Duration::from_secs(3600),
            idle_timeout: None,
            workdir: None,
            connect_timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(600),
        }
    }
}

/// What the Daytona backend does with its sandbox on [`close`](crate::Backend::close).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DaytonaOnClose {
    /// Delete it (the default for a sandbox without a name).
    Delete,
    /// Stop it, to be resumed by name later (the default for a named sandbox).
    Stop,
    /// Leave it running (background jobs keep running in it).
    Keep,
}

/// The Daytona backend: commands run in a Daytona sandbox, over Daytona's REST API (the
/// control plane for the sandbox, the sandbox's toolbox for commands).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaytonaConfig {
    /// The API. Default: `DAYTONA_API_URL`, else `DAYTONA_SERVER_URL`, else
    /// `https://app.daytona.io/api`. `http://` is refused except on loopback.
    pub api_url: Option<String>,
    /// A file holding the API key (mode 600). Default: the `DAYTONA_API_KEY` variable.
    pub api_key_file: Option<PathBuf>,
    /// The region (`target`). Default: `DAYTONA_TARGET`, else the organization's default.
    pub target: Option<String>,
    /// A sandbox name: an existing sandbox with this name is resumed (started when stopped),
    /// else one is created with it. None: a new anonymous sandbox.
    pub name: Option<String>,
    /// The snapshot to create the sandbox from. Default: Daytona's default snapshot.
    pub snapshot: Option<String>,
    /// CPUs.
    pub cpu: Option<u32>,
    /// Memory, rounded up to whole GiB (Daytona's unit), e.g. `4GiB`.
    #[serde(deserialize_with = "de_size_opt")]
    pub memory: Option<u64>,
    /// Disk, rounded up to whole GiB, e.g. `10GiB`.
    #[serde(deserialize_with = "de_size_opt")]
    pub disk: Option<u64>,
    /// Block all network access from the sandbox.
    pub network_block_all: bool,
    /// Daytona stops the sandbox after this many idle minutes (0: never).
    pub auto_stop_minutes: Option<u32>,
    /// What `close` does with the sandbox. Default: delete an anonymous sandbox, stop a named one.
    pub on_close: Option<DaytonaOnClose>,
    /// Default working directory inside the sandbox.
    pub workdir: Option<String>,
    /// Where job files live inside the sandbox. Default: `/tmp/nestbox-jobs`.
    pub jobs_dir: Option<String>,
    /// How long creating or starting the sandbox may take.
    #[serde(deserialize_with = "de_duration")]
    pub start_timeout: Duration,
    /// How long one API request may take.
    #[serde(deserialize_with = "de_duration")]
    pub request_timeout: Duration,
}

impl Default for DaytonaConfig {
    fn default() -> Self {
        DaytonaConfig {
            api_url: None,
            api_key_file: None,
            target: None,
            name: None,
            snapshot: None,
            cpu: None,
            memory: None,
            disk: None,
            network_block_all: true,
            auto_stop_minutes: None,
            on_close: None,
            workdir: None,
            jobs_dir: None,
            start_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(60),
        }
    }
}

pub(crate) fn de_duration_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Duration>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|t| nestbox_policy::units::parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

pub(crate) fn de_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    nestbox_policy::units::parse_duration(&text).map_err(serde::de::Error::custom)
}

/// A size as text (`512MiB`) or a number of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

fn size_of<E: serde::de::Error>(s: SizeText) -> std::result::Result<u64, E> {
    match s {
        SizeText::Bytes(n) => Ok(n),
        SizeText::Text(t) => nestbox_policy::units::parse_size(&t).map_err(E::custom),
    }
}

pub(crate) fn de_size<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    size_of(SizeText::deserialize(d)?)
}

pub(crate) fn de_size_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    Option::<SizeText>::deserialize(d)?.map(size_of).transpose()
}

/// Builds the backend the configuration names, prepares it, and returns it. If it cannot be
/// built (socket missing, host unreachable, executable absent, image absent) this returns the
/// error: it never tries another backend, and nothing runs.
pub async fn open(config: &ExecConfig) -> Result<Box<dyn Backend>> {
    let ctx = crate::Context {
        output: config.output.clone(),
        state_dir: config.state_dir(),
    };
    let mut backend: Box<dyn Backend> = match &config.backend {
        BackendConfig::Local(c) => Box::new(crate::local::LocalBackend::new(c, ctx)?),
        BackendConfig::Docker(c) => Box::new(crate::docker::DockerBackend::connect(c, ctx).await?),
        BackendConfig::Ssh(c) => Box::new(crate::ssh::SshBackend::new(c, ctx)?),
        BackendConfig::Apptainer(c) => Box::new(crate::apptainer::ApptainerBackend::new(c, ctx)?),
        BackendConfig::Slurm(c) => Box::new(crate::slurm::SlurmBackend::new(c, ctx)?),
        BackendConfig::Modal(c) => Box::new(crate::modal::ModalBackend::new(c, ctx)?),
        BackendConfig::Daytona(c) => Box::new(crate::daytona::DaytonaBackend::new(c, ctx)?),
    };
    backend.prepare().await?;
    Ok(backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docker_configuration_parses_with_units() {
        let c = ExecConfig::from_toml(
            "[backend]\nkind = \"docker\"\nimage = \"localhost/busybox\"\nmemory = \"64MiB\"\nidle_ttl = \"2m\"\n",
        )
        .unwrap();
        let BackendConfig::Docker(d) = c.backend else {
            panic!("not docker")
        };
        assert_eq!(d.memory, Some(64 << 20));
        assert_eq!(d.idle_ttl, Duration::from_secs(120));
        assert!(d.reuse);
    }

    #[test]
    fn an_unknown_kind_is_an_unknown_backend_error() {
        let e = ExecConfig::from_toml("[backend]\nkind = \"kubernetes\"\n").unwrap_err();
        assert!(matches!(e, ExecError::UnknownBackend { name } if name == "kubernetes"));
    }

    #[test]
    fn unknown_fields_are_refused_not_ignored() {
        let e = ExecConfig::from_toml("[backend]\nkind = \"ssh\"\nhost = \"h\"\nhostt = \"x\"\n")
            .unwrap_err();
        assert!(
            matches!(
                e,
                ExecError::InvalidConfig {
                    backend: BackendKind::Ssh,
                    ..
                }
            ),
            "{e}"
        );
    }
}
