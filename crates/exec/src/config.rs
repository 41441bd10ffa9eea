//! The one typed configuration that selects a backend, and [`open`], which builds exactly that
//! backend or fails. There is no default backend to fall back to and no second choice: a
//! configuration that says `docker` runs on Docker or does not run.
//!
//! ```toml
//! [backend]
//! kind = "docker"             # local | docker | ssh | apptainer
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
                    "the exec configuration needs [backend] kind = \"local\" | \"docker\" | \"ssh\" | \"apptainer\"".into(),
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
}

impl BackendConfig {
    /// Which backend this configures.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendConfig::Local(_) => BackendKind::Local,
            BackendConfig::Docker(_) => BackendKind::Docker,
            BackendConfig::Ssh(_) => BackendKind::Ssh,
            BackendConfig::Apptainer(_) => BackendKind::Apptainer,
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
    /// Hosts the container may reach. Empty: no network at all (`NetworkMode: none`).
    pub allow_hosts: Vec<String>,
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

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Duration, D::Error> {
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

fn de_size<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    size_of(SizeText::deserialize(d)?)
}

fn de_size_opt<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
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
