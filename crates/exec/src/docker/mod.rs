//! The Docker backend: commands run in a long-lived, hardened container through the Docker
//! Engine API on its unix socket. The same code drives dockerd and Podman's
//! Docker-compatible service; the API version is negotiated with the engine (dockerd 20.10
//! refuses anything above 1.41).
//!
//! **The container.** Created from the configured image, which must already be in the engine
//! (nothing is pulled). Every capability dropped, `no-new-privileges`, an init as PID 1 (it
//! reaps orphans and forwards signals), a pids limit, memory and CPU limits when configured,
//! a non-root user when the image allows (the image's own user, else 65534:65534), the root
//! filesystem read-only on request, `NetworkMode: none`. A private tmpfs at `/run/nestbox`
//! (mode 1777: Podman mounts a tmpfs without `Mode` as 000) holds the job files. No
//! `AutoRemove` (Podman loses the exit code with it): containers are removed with
//! `DELETE ?force=1`.
//!
//! **Reuse and reaping.** A reusable container carries labels (managed, realm, a key hashed
//! from image and settings) and is found again by them; its lease (see [`lease`]) says until
//! when it may idle. [`prepare`](Backend::prepare) reaps the realm's orphans first: containers
//! whose lease expired and that nobody holds, private containers whose owner is gone, stopped
//! ones. A container that still runs background jobs is kept and its lease extended.
//!
//! **Commands** go through the [supervisor](crate::supervisor) in an exec (see [`exec`]):
//! timeouts and kills are carried out inside the container, on the command's whole tree.
//!
//! **Network.** Always `NetworkMode: none`. With `allow_hosts`, the container's only way out
//! is a relay whose listener is created inside its network namespace (see [`egress`]); its
//! commands get `HTTPS_PROXY` and friends. Where that cannot be done (nestbox not root beside
//! a rootful engine), asking for hosts is an error, never a silently open network.

mod egress;
pub mod exec;
pub mod exposure;
pub mod lease;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountTmpfsOptions, MountType};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions,
};

use crate::Context;
use crate::backend::{
    Backend, BackendKind, BoxFuture, Cancellation, CommandSpec, Descriptor, HostExposure,
    Isolation, JobId, JobStatus, OutputChunk, RunResult, Stream,
};
use crate::config::DockerConfig;
use crate::error::{ExecError, Result};
use crate::job::{Jobs, random_token, supervised_end};
use crate::output::Capture;
use crate::supervisor;
use exec::{DockerTransport, ExecTarget, engine_error};
use lease::{Lease, Verdict};

/// Label on every container nestbox creates.
pub const LABEL_MANAGED: &str = "dev.nestbox.managed";
/// Label naming the lease directory's realm (see [`lease`]).
pub const LABEL_REALM: &str = "dev.nestbox.realm";
/// Label holding the hash of image and settings, for reuse.
pub const LABEL_KEY: &str = "dev.nestbox.key";
/// Where the job files live inside the container (a private tmpfs).
pub const JOBS_ROOT: &str = "/run/nestbox";
const JOBS_DIR: &str = "/run/nestbox/jobs";
/// Seconds between SIGTERM and SIGKILL when the supervisor kills a tree in the container.
const GRACE_SECS: u64 = 2;
/// The container's first command (after the init): idle until removed.
const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done";

/// A backend that runs commands in a container through the Docker Engine API.
pub struct DockerBackend {
    config: DockerConfig,
    ctx: Context,
    docker: Docker,
    socket: String,
    lease_dir: PathBuf,
    realm: String,
    prepared: Option<Prepared>,
    lease: Mutex<Option<Lease>>,
    descriptor: Descriptor,
    /// The container's relay, when hosts are allowed.
    relay: Option<egress::ContainerRelay>,
}

#[derive(Clone)]
struct Prepared {
    container: String,
    name: String,
    user: String,
    workdir: String,
}

/// FNV-1a, 64 bits: a hash that stays the same across Rust versions and processes.
fn fnv64(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The engine's socket path from the configuration or `DOCKER_HOST`. A `DOCKER_HOST` that is
/// not a unix socket is an error, not a reason to try the default socket instead.
fn socket_path(config: &DockerConfig) -> Result<String> {
    let raw = match (&config.socket, std::env::var("DOCKER_HOST")) {
        (Some(s), _) => s.clone(),
        (None, Ok(h)) if !h.is_empty() => h,
        _ => "/var/run/docker.sock".to_string(),
    };
    if let Some(path) = raw.strip_prefix("unix://") {
        return Ok(path.to_string());
    }
    if raw.starts_with('/') {
        return Ok(raw);
    }
    Err(ExecError::InvalidConfig {
        backend: BackendKind::Docker,
        reason: format!(
            "`{raw}` is not a unix socket; nestbox talks to the engine only over its unix socket (set socket = \"unix:///path\")"
        ),
    })
}

/// Connects and settles the API version. The first connection to an engine negotiates it
/// (`GET /version`: dockerd 20.10 refuses anything above 1.41); the result is remembered per
/// socket until the socket file changes (the engine restarted), because Podman takes about
/// 200 ms to answer `/version` and a command line pays that on every call otherwise.
async fn connect_negotiated(socket: &str, cache_dir: &std::path::Path) -> Result<Docker> {
    use std::os::unix::fs::MetadataExt;
    let unavailable = |e: bollard::errors::Error| ExecError::Unavailable {
        backend: BackendKind::Docker,
        reason: format!("the engine at {socket} does not answer: {e}"),
        hint: None,
    };
    let stamp = std::fs::metadata(socket)
        .map(|m| {
            format!(
                "{}:{}:{}",
                m.dev(),
                m.ino(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000
            )
        })
        .unwrap_or_default();
    let cache = cache_dir.join(fnv64(&[socket]));
    let remembered = std::fs::read_to_string(&cache).ok().and_then(|text| {
        let (at, version) = text.trim().split_once(' ')?;
        let (major, minor) = version.split_once('.')?;
        (at == stamp).then_some(bollard::ClientVersion {
            major_version: major.parse().ok()?,
            minor_version: minor.parse().ok()?,
        })
    });
    if let Some(version) = remembered {
        // No round trip here: the first request (the image inspect) finds a dead engine and
        // prepare reports it as unavailable.
        return Docker::connect_with_unix(socket, 120, &version).map_err(unavailable);
    }
    let docker = Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION)
        .map_err(unavailable)?
        .negotiate_version()
        .await
        .map_err(unavailable)?;
    let v = docker.client_version();
    let _ = std::fs::create_dir_all(cache_dir);
    let _ = std::fs::write(
        &cache,
        format!("{stamp} {}.{}\n", v.major_version, v.minor_version),
    );
    Ok(docker)
}

fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The user commands run as: the configured one, else the image's own when it is not root,
/// else nobody.
fn choose_user(configured: Option<&str>, image_user: Option<&str>) -> String {
    if let Some(u) = configured {
        return u.to_string();
    }
    match image_user.map(str::trim) {
        Some(u) if !u.is_empty() && !matches!(u, "root" | "0" | "0:0" | "root:root") => {
            u.to_string()
        }
        _ => "65534:65534".to_string(),
    }
}

impl DockerBackend {
    /// Connects to the engine and negotiates the API version. Fails (never falls back) when
    /// the socket is missing or the engine does not answer.
    pub(crate) async fn connect(config: &DockerConfig, ctx: Context) -> Result<Self> {
        if config.image.trim().is_empty() {
            return Err(ExecError::InvalidConfig {
                backend: BackendKind::Docker,
                reason: "no image: set image (for example localhost/busybox)".into(),
            });
        }
        let socket = socket_path(config)?;
        if !std::path::Path::new(&socket).exists() {
            return Err(ExecError::Unavailable {
                backend: BackendKind::Docker,
                reason: format!("no engine socket at {socket}"),
                hint: Some(
                    "start dockerd or `podman system service`, or point socket at the engine's socket".into(),
                ),
            });
        }
        let docker = connect_negotiated(&socket, &ctx.state_dir.join("docker-api")).await?;
        let lease_dir = ctx.state_dir.join("docker-leases");
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        // SAFETY: geteuid has no failure mode.
        let uid = unsafe { libc::geteuid() }.to_string();
        let realm = fnv64(&[&lease_dir.to_string_lossy(), host.trim(), &uid]);
        let descriptor = Descriptor {
            kind: BackendKind::Docker,
            isolation: Isolation::Container,
            host_exposure: HostExposure {
                exposed: !config.mounts.is_empty(),
                paths: Vec::new(),
                notes: vec!["not prepared yet: computed from the created container".into()],
            },
            streams_output: true,
            cancellation: Cancellation::SandboxSupervisor,
            target: format!("{} via {socket}", config.image),
        };
        Ok(DockerBackend {
            config: config.clone(),
            ctx,
            docker,
            socket,
            lease_dir,
            realm,
            prepared: None,
            lease: Mutex::new(None),
            descriptor,
            relay: None,
        })
    }

    /// The name of the container commands run in, once prepared.
    pub fn container_name(&self) -> Option<&str> {
        self.prepared.as_ref().map(|p| p.name.as_str())
    }

    fn prepared(&self) -> Result<&Prepared> {
        self.prepared.as_ref().ok_or_else(|| {
            ExecError::InvalidRequest(
                "the docker backend is not prepared: call prepare() (open() does)".into(),
            )
        })
    }

    fn target(&self) -> Result<ExecTarget> {
        let p = self.prepared()?;
        Ok(ExecTarget {
            docker: self.docker.clone(),
            container: p.container.clone(),
            user: p.user.clone(),
        })
    }

    fn renew(&self, at_least: Duration) -> Result<()> {
        let mut lease = self.lease.lock().expect("lease lock");
        match lease.as_mut() {
            Some(l) => l.renew(self.config.idle_ttl.max(at_least)),
            None => Ok(()),
        }
    }

    fn reuse_key(&self, image_id: &str, user: &str, workdir: &str) -> String {
        let c = &self.config;
        fnv64(&[
            image_id,
            user,
            workdir,
            &format!("{:?}", c.memory),
            &format!("{:?}", c.cpus),
            &c.pids_limit.to_string(),
            &c.read_only_rootfs.to_string(),
            &c.mounts.join("\n"),
            &c.job_tmpfs_size.to_string(),
            "network=none",
        ])
    }

    fn create_body(&self, user: &str, workdir: &str, key: &str) -> ContainerCreateBody {
        let c = &self.config;
        let labels = HashMap::from([
            (LABEL_MANAGED.to_string(), "1".to_string()),
            (LABEL_REALM.to_string(), self.realm.clone()),
            (LABEL_KEY.to_string(), key.to_string()),
        ]);
        let jobs_tmpfs = Mount {
            target: Some(JOBS_ROOT.into()),
            typ: Some(MountType::TMPFS),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(c.job_tmpfs_size as i64),
                mode: Some(0o1777),
                ..Default::default()
            }),
            ..Default::default()
        };
        let memory = c.memory.map(|m| m as i64);
        ContainerCreateBody {
            image: Some(c.image.clone()),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
            cmd: Some(vec![KEEPALIVE.into()]),
            user: Some(user.to_string()),
            working_dir: Some(workdir.to_string()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                init: Some(true),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                pids_limit: Some(c.pids_limit),
                memory,
                memory_swap: memory,
                nano_cpus: c.cpus.map(|n| (n * 1e9) as i64),
                readonly_rootfs: Some(c.read_only_rootfs),
                network_mode: Some("none".into()),
                binds: (!c.mounts.is_empty()).then(|| c.mounts.clone()),
                mounts: Some(vec![jobs_tmpfs]),
                auto_remove: Some(false),
                privileged: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn create_container(
        &self,
        user: &str,
        workdir: &str,
        key: &str,
    ) -> Result<(String, String, Lease)> {
        let name = format!("nestbox-{}-{}", &key[..8], random_token(4));
        let lease = Lease::create(
            &self.lease_dir,
            &name,
            self.config.reuse,
            self.config.idle_ttl,
        )?;
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                self.create_body(user, workdir, key),
            )
            .await;
        let id = match created {
            Ok(r) => r.id,
            Err(e) => {
                lease.remove();
                return Err(engine_error("create the container", e));
            }
        };
        if let Err(e) = self.docker.start_container(&id, None).await {
            self.remove_container(&id).await;
            lease.remove();
            return Err(engine_error("start the container", e));
        }
        Ok((id, name, lease))
    }

    async fn remove_container(&self, id: &str) {
        let _ = self
            .docker
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await;
    }

    async fn list(
        &self,
        key: Option<&str>,
        running_only: bool,
    ) -> Result<Vec<bollard::models::ContainerSummary>> {
        let mut labels = vec![
            format!("{LABEL_MANAGED}=1"),
            format!("{LABEL_REALM}={}", self.realm),
        ];
        if let Some(k) = key {
            labels.push(format!("{LABEL_KEY}={k}"));
        }
        let filters = HashMap::from([("label".to_string(), labels)]);
        let mut list = self
            .docker
            .list_containers(Some(ListContainersOptions {
                all: !running_only,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .map_err(|e| engine_error("list containers", e))?;
        list.sort_by_key(|c| std::cmp::Reverse(c.created.unwrap_or(0)));
        Ok(list)
    }

    /// Removes this realm's orphans: see the module documentation and [`lease`]. Returns
    /// the names of the containers removed.
    pub async fn reap_orphans(&self) -> Result<Vec<String>> {
        let list = self.list(None, false).await?;
        Ok(self.reap_from(&list).await)
    }

    async fn reap_from(&self, list: &[bollard::models::ContainerSummary]) -> Vec<String> {
        let mut live = Vec::new();
        let mut reaped = Vec::new();
        for c in list {
            let (Some(id), Some(name)) = (c.id.clone(), summary_name(c)) else {
                continue;
            };
            live.push(name.clone());
            let running = matches!(
                c.state,
                Some(bollard::models::ContainerSummaryStateEnum::RUNNING)
            );
            let created = c.created.unwrap_or(0).max(0) as u64;
            let (verdict, hold) = lease::judge(&self.lease_dir, &name, created, running);
            let (Verdict::Reap, Some(mut hold)) = (verdict, hold) else {
                continue;
            };
            if running && self.runs_jobs(&id).await {
                hold.extend(self.config.idle_ttl);
                continue;
            }
            self.remove_container(&id).await;
            hold.remove();
            reaped.push(name);
        }
        lease::remove_stale(&self.lease_dir, &live);
        reaped
    }

    async fn runs_jobs(&self, container: &str) -> bool {
        let user = match self.docker.inspect_container(container, None).await {
            Ok(i) => i.config.and_then(|c| c.user).unwrap_or_default(),
            Err(_) => return false,
        };
        let target = ExecTarget {
            docker: self.docker.clone(),
            container: container.to_string(),
            user,
        };
        match target
            .call_collect("busy", &[JOBS_DIR.to_string()], &BTreeMap::new())
            .await
        {
            Ok(out) => out.stdout.starts_with(b"busy"),
            // Cannot tell: keep it rather than kill someone's job.
            Err(_) => true,
        }
    }

    /// A running container of this key from `list` that we can join (shared lease taken;
    /// under it, nobody in this realm can reap the container).
    fn find_reusable(
        &self,
        key: &str,
        list: &[bollard::models::ContainerSummary],
    ) -> Option<(String, String, Lease)> {
        list.iter().find_map(|c| {
            let has_key = c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_KEY))
                .is_some_and(|k| k == key);
            let running = matches!(
                c.state,
                Some(bollard::models::ContainerSummaryStateEnum::RUNNING)
            );
            let (Some(id), Some(name), true, true) =
                (c.id.clone(), summary_name(c), has_key, running)
            else {
                return None;
            };
            let lease = Lease::join(&self.lease_dir, &name, self.config.idle_ttl)?;
            Some((id, name, lease))
        })
    }

    /// The host exposure of a container: computed once from its inspect (and its volumes'),
    /// then kept beside its lease, since neither a container's mounts nor a volume's options
    /// can change after creation.
    async fn exposure_of(&self, container: &str, name: &str) -> Result<HostExposure> {
        let cached = lease::side_file(&self.lease_dir, name, "exposure.json");
        if let Some(e) = std::fs::read_to_string(&cached)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
        {
            return Ok(e);
        }
        let inspect = self
            .docker
            .inspect_container(container, None)
            .await
            .map_err(|e| engine_error("inspect the container", e))?;
        let exposure = exposure::host_exposure(&self.docker, &inspect).await;
        if exposure.notes.is_empty() {
            let _ = std::fs::write(
                &cached,
                serde_json::to_string(&exposure).unwrap_or_default(),
            );
        }
        Ok(exposure)
    }

    async fn prepare_inner(&mut self) -> Result<()> {
        if self.prepared.is_some() {
            return Ok(());
        }
        let image = match self.docker.inspect_image(&self.config.image).await {
            Ok(i) => i,
            Err(e) if is_not_found(&e) => {
                return Err(ExecError::ImageNotFound {
                    backend: BackendKind::Docker,
                    image: self.config.image.clone(),
                    engine: self.socket.clone(),
                });
            }
            Err(e @ bollard::errors::Error::DockerResponseServerError { .. }) => {
                return Err(engine_error("inspect the image", e));
            }
            Err(e) => {
                return Err(ExecError::Unavailable {
                    backend: BackendKind::Docker,
                    reason: format!("the engine at {} does not answer: {e}", self.socket),
                    hint: None,
                });
            }
        };
        let image_config = image.config.clone().unwrap_or_default();
        let user = choose_user(self.config.user.as_deref(), image_config.user.as_deref());
        let workdir = self
            .config
            .workdir
            .clone()
            .or(image_config.working_dir.filter(|w| !w.is_empty()))
            .unwrap_or_else(|| "/".to_string());
        let key = self.reuse_key(
            image.id.as_deref().unwrap_or(&self.config.image),
            &user,
            &workdir,
        );
        // One listing serves the reaper and the search for a warm container. Orphans go
        // first; a failure to reap must not stop the work at hand.
        let mut list = self.list(None, false).await?;
        let reaped = self.reap_from(&list).await;
        list.retain(|c| summary_name(c).is_none_or(|n| !reaped.contains(&n)));

        let (container, name, lease) = if self.config.reuse {
            std::fs::create_dir_all(&self.lease_dir)
                .map_err(|e| ExecError::io(format!("creating {}", self.lease_dir.display()), e))?;
            // One creator per key at a time, so concurrent first calls share one container.
            let lock_path = self.lease_dir.join(format!("{key}.create"));
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .map_err(|e| ExecError::io(format!("opening {}", lock_path.display()), e))?;
            // SAFETY: flock(2) on a descriptor we own; released when `lock` is dropped.
            unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
            let found = match self.find_reusable(&key, &list) {
                Some(f) => Some(f),
                // Another process may have created one while we waited for the lock.
                None => {
                    let fresh = self.list(Some(&key), true).await?;
                    self.find_reusable(&key, &fresh)
                }
            };
            let result = match found {
                Some(f) => f,
                None => self.create_container(&user, &workdir, &key).await?,
            };
            drop(lock);
            result
        } else {
            self.create_container(&user, &workdir, &key).await?
        };
        self.descriptor.host_exposure = self.exposure_of(&container, &name).await?;
        if !self.config.allow_hosts.is_empty() {
            let program = crate::local::find_nestbox(
                self.config.relay_program.as_deref(),
                BackendKind::Docker,
            )?;
            let relay =
                egress::start(&self.docker, &container, &self.config.allow_hosts, &program).await?;
            self.relay = Some(relay);
        }
        let network = match &self.relay {
            Some(r) => format!(
                "; network: its relay on 127.0.0.1:{} inside, allowing {}",
                r.port,
                self.config.allow_hosts.join(", ")
            ),
            None => "; no network".into(),
        };
        self.descriptor.target = format!(
            "container {name} ({}) via {}{network}",
            self.config.image, self.socket
        );
        *self.lease.lock().expect("lease lock") = Some(lease);
        self.prepared = Some(Prepared {
            container,
            name,
            user,
            workdir,
        });
        Ok(())
    }

    /// The command's environment, plus the proxy variables of the container's relay (which win:
    /// the relay is the only way out).
    fn with_relay_env(&self, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut env = env.clone();
        if let Some(relay) = &self.relay {
            env.extend(relay.env());
        }
        env
    }

    fn job_id(&self, token: &str) -> Result<JobId> {
        let p = self.prepared()?;
        JobId::parse(&format!(
            "{}-{token}",
            &p.container[..12.min(p.container.len())]
        ))
    }

    /// The container and job directory a job id points at. Jobs of other containers of this
    /// realm are reachable too (a later process may have been given another container).
    async fn locate(&self, job: &JobId) -> Result<(ExecTarget, String)> {
        let no_job = |detail: String| ExecError::NoSuchJob {
            backend: BackendKind::Docker,
            id: job.to_string(),
            detail: Some(detail),
        };
        let (prefix, token) = job
            .as_str()
            .split_once('-')
            .ok_or_else(|| no_job("not a docker job id (CONTAINER-TOKEN)".into()))?;
        let dir = format!("{JOBS_DIR}/{token}");
        let p = self.prepared()?;
        if p.container.starts_with(prefix) {
            return Ok((self.target()?, dir));
        }
        let inspect = self
            .docker
            .inspect_container(prefix, None)
            .await
            .map_err(|_| no_job(format!("no container {prefix}")))?;
        let config = inspect.config.unwrap_or_default();
        let ours = config
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_REALM))
            .is_some_and(|r| *r == self.realm);
        if !ours {
            return Err(no_job(format!(
                "container {prefix} is not one of this realm's"
            )));
        }
        Ok((
            ExecTarget {
                docker: self.docker.clone(),
                container: inspect.id.unwrap_or_else(|| prefix.to_string()),
                user: config.user.unwrap_or_default(),
            },
            dir,
        ))
    }

    async fn run_inner(&self, cmd: &CommandSpec) -> Result<RunResult> {
        cmd.validate()?;
        let p = self.prepared()?;
        self.renew(cmd.timeout.unwrap_or_default() + Duration::from_secs(60))?;
        let started_at = SystemTime::now();
        let clock = std::time::Instant::now();
        let dir = format!("{JOBS_DIR}/{}", random_token(8));
        let args = supervisor::start_args(
            &dir,
            Some(cmd.workdir.as_deref().unwrap_or(&p.workdir)),
            supervisor::timeout_secs(cmd.timeout),
            GRACE_SECS,
            &cmd.argv,
        );
        let spill = self.ctx.spill_dir();
        let mut out = Capture::new(&self.ctx.output, &spill, "docker-stdout");
        let mut err = Capture::new(&self.ctx.output, &spill, "docker-stderr");
        let target = self.target()?;
        let transport = DockerTransport {
            target: target.clone(),
        };
        let jobs = Jobs {
            transport: &transport,
            kind: BackendKind::Docker,
            grace_secs: GRACE_SECS,
        };
        // The supervisor's own watchdog fires at the timeout; this is the backstop for a
        // supervisor that cannot (the container frozen, the exec stuck).
        let deadline = cmd.timeout.map(|t| t + Duration::from_secs(GRACE_SECS + 5));
        let job = JobId::parse("foreground")?;
        let on_deadline = async {
            let _ = jobs.kill(&job, &dir).await;
        };
        let env = self.with_relay_env(&cmd.env);
        let (code, deadline_hit) = target
            .call_streaming(&args, &env, &mut out, &mut err, deadline, on_deadline)
            .await?;
        let stdout = out.finish();
        let stderr = err.finish();
        let timed_out = supervised_end(
            BackendKind::Docker,
            cmd,
            code,
            &stderr,
            deadline_hit.then_some(true),
        )?;

        Ok(RunResult {
            exit_code: code,
            stdout,
            stderr,
            started_at,
            duration: clock.elapsed(),
            timed_out,
            backend: BackendKind::Docker,
        })
    }

    async fn spawn_inner(&self, cmd: &CommandSpec) -> Result<JobId> {
        cmd.validate()?;
        let p = self.prepared()?;
        self.renew(cmd.timeout.unwrap_or_default() + Duration::from_secs(60))?;
        let token = random_token(8);
        let mut cmd = cmd.clone();
        cmd.workdir = Some(cmd.workdir.unwrap_or_else(|| p.workdir.clone()));
        cmd.env = self.with_relay_env(&cmd.env);
        let transport = DockerTransport {
            target: self.target()?,
        };
        let jobs = Jobs {
            transport: &transport,
            kind: BackendKind::Docker,
            grace_secs: GRACE_SECS,
        };
        jobs.spawn(&format!("{JOBS_DIR}/{token}"), &cmd, &cmd.argv)
            .await?;
        self.job_id(&token)
    }

    async fn with_job<T, F>(&self, job: &JobId, f: F) -> Result<T>
    where
        F: for<'j> AsyncFnOnce(&Jobs<'j>, &str) -> Result<T>,
    {
        let (target, dir) = self.locate(job).await?;
        let transport = DockerTransport { target };
        let jobs = Jobs {
            transport: &transport,
            kind: BackendKind::Docker,
            grace_secs: GRACE_SECS,
        };
        f(&jobs, &dir).await
    }
}

fn summary_name(c: &bollard::models::ContainerSummary) -> Option<String> {
    c.names
        .as_ref()?
        .first()
        .map(|n| n.trim_start_matches('/').to_string())
}

impl Backend for DockerBackend {
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
        Box::pin(self.with_job(job, async |jobs, dir| jobs.poll(job, dir).await))
    }

    fn read<'a>(
        &'a self,
        job: &'a JobId,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<OutputChunk>> {
        Box::pin(self.with_job(job, async move |jobs, dir| {
            jobs.read(job, dir, stream, offset, max).await
        }))
    }

    fn wait<'a>(
        &'a self,
        job: &'a JobId,
        timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(self.with_job(job, async move |jobs, dir| {
            jobs.wait(job, dir, timeout).await
        }))
    }

    fn kill<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<JobStatus>> {
        Box::pin(self.with_job(job, async |jobs, dir| jobs.kill(job, dir).await))
    }

    fn forget<'a>(&'a self, job: &'a JobId) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.with_job(job, async |jobs, dir| jobs.forget(job, dir).await))
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let lease = self.lease.lock().expect("lease lock").take();
            if let (Some(p), Some(lease)) = (self.prepared.take(), lease) {
                if self.config.reuse {
                    drop(lease);
                } else {
                    self.remove_container(&p.container).await;
                    lease.remove();
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_images_run_as_nobody_unless_root_is_asked_for() {
        assert_eq!(choose_user(None, None), "65534:65534");
        assert_eq!(choose_user(None, Some("root")), "65534:65534");
        assert_eq!(choose_user(None, Some("app")), "app");
        assert_eq!(choose_user(Some("root"), Some("app")), "root");
    }

    #[test]
    fn a_docker_host_that_is_not_a_unix_socket_is_refused() {
        let c = DockerConfig {
            socket: Some("tcp://10.0.0.1:2375".into()),
            ..DockerConfig::default()
        };
        assert!(matches!(
            socket_path(&c),
            Err(ExecError::InvalidConfig { .. })
        ));
        let c = DockerConfig {
            socket: Some("unix:///run/x.sock".into()),
            ..DockerConfig::default()
        };
        assert_eq!(socket_path(&c).unwrap(), "/run/x.sock");
    }
}
