//! The gateway: the outer egress proxy for agents and their caged workers. See the crate
//! documentation for the checks in order; this module runs them.
//!
//! Threads: a few workers, each a single-threaded runtime accepting from the same listener
//! (tunnels reuse the relay's splice code, which is single-threaded by design), and the main
//! thread serving the control socket and reloading the policy on `SIGHUP` and on file change.

mod audit;
mod ca;
mod cells;
mod conn;
pub mod control;
mod generation;
mod identity;
mod inspect;
mod io;
pub mod placeholder;
mod pool;
mod refusal;
mod reload;
mod secret;
mod tls;

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::net::TcpListener;

pub use ca::{CaError, CertAuthority, cert_path};
pub use control::{Registration, default_state_dir, register_cell, request};
use generation::Generation;
pub use identity::CallerId;
pub use secret::{Secret, SecretError};

use crate::audit::{AuditLog, rfc3339};
use crate::config::{Limits, StaticHosts};
use crate::relay::lifecycle;

/// How `nestbox gateway` runs.
#[derive(Debug)]
pub struct GatewayConfig {
    /// The policy file (reloaded on `SIGHUP` and when it changes).
    pub policy: PathBuf,
    /// Where the CA and the control socket live.
    pub state_dir: PathBuf,
    /// Names answered without DNS (`--resolve host=addr`; tests and pinning).
    pub hosts: StaticHosts,
    /// One JSON line per decision and per inspected request.
    pub audit: Option<AuditLog>,
    /// Size and time bounds (the relay's).
    pub limits: Limits,
    /// Worker threads accepting connections.
    pub workers: usize,
    /// How often the policy file (and secret files, extra roots) are checked for changes.
    pub poll: Duration,
    /// Written one byte once the gateway accepts connections.
    pub ready: Option<OwnedFd>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The policy (or a secret, or an extra root bundle) could not be loaded.
    #[error("{0}")]
    Policy(String),
    /// The CA could not be loaded or created.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// Something else in setting up.
    #[error("{0}")]
    Setup(String),
}

/// Connection counts, for the status.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    open: AtomicU64,
    total: AtomicU64,
}

impl Stats {
    pub(crate) fn opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn closed(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The last reload, for the status.
#[derive(Debug, Default)]
struct ReloadState {
    last_ok: Option<String>,
    last_error: Option<(String, String)>,
    refused: u64,
}

/// State shared by every thread of one gateway.
pub(crate) struct Shared {
    generation: RwLock<Arc<Generation>>,
    pub cells: cells::Cells,
    pub ca: CertAuthority,
    pub hosts: StaticHosts,
    pub limits: Limits,
    pub listen: SocketAddr,
    pub stats: Stats,
    audit_log: Option<AuditLog>,
    audit_failed: AtomicBool,
    policy_path: PathBuf,
    state_dir: PathBuf,
    started: String,
    reload: Mutex<ReloadState>,
}

impl Shared {
    /// The generation new connections use.
    pub(crate) fn current(&self) -> Arc<Generation> {
        match self.generation.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn audit(&self, record: &audit::GatewayRecord) {
        if let Some(log) = &self.audit_log
            && let Err(e) = log.write_json(record)
            && !self.audit_failed.swap(true, Ordering::Relaxed)
        {
            say(&format!("cannot write the audit log (reported once): {e}"));
        }
    }

    /// `nestbox gateway status` as JSON.
    pub(crate) fn status_json(&self) -> Value {
        let g = self.current();
        let reload = self.reload.lock().map(|r| {
            json!({
                "last_ok": r.last_ok,
                "last_error": r.last_error.as_ref().map(|(t, m)| json!({"time": t, "error": m})),
                "refused": r.refused,
            })
        });
        json!({
            "ok": true,
            "pid": std::process::id(),
            "listen": self.listen.to_string(),
            "started": self.started,
            "state_dir": self.state_dir.display().to_string(),
            "policy": self.policy_path.display().to_string(),
            "generation": g.number,
            "loaded_at": g.loaded_at,
            "rules": g.policy.rules.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
            "credentials": g.policy.credentials.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "warnings": g.policy.warnings,
            "reload": reload.unwrap_or(Value::Null),
            "cells": self.cells.list(),
            "connections": {
                "open": self.stats.open.load(Ordering::Relaxed),
                "total": self.stats.total.load(Ordering::Relaxed),
            },
        })
    }
}

/// A short random hex string from the kernel's random source.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let mut filled = 0;
    while filled < bytes {
        // SAFETY: getrandom writes at most the given length into our buffer.
        let n = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), bytes - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // No randomness means no unforgeable token: stop rather than issue a weak one.
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn say(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "nestbox gateway: {message}");
}

fn process_env(name: &str) -> Option<Vec<u8>> {
    std::env::var_os(name).map(|v| v.into_encoded_bytes())
}

/// Runs the gateway on `listener` until the process is stopped.
pub fn serve(listener: std::net::TcpListener, config: GatewayConfig) -> Result<(), GatewayError> {
    if let Err(e) = lifecycle::raise_nofile_limit() {
        say(&format!("could not raise the open-file limit: {e}"));
    }
    lifecycle::ignore_sigpipe();
    let ca = CertAuthority::load_or_create(&config.state_dir)?;
    // Stamped before reading: a change made while the gateway starts is seen as a change.
    let policy_stamp = reload::stamp(std::slice::from_ref(&config.policy));
    let generation =
        Generation::load(&config.policy, 1, &process_env).map_err(GatewayError::Policy)?;
    for w in &generation.policy.warnings {
        say(&format!("warning: {w}"));
    }
    let listen = listener
        .local_addr()
        .map_err(|e| GatewayError::Setup(format!("listener: {e}")))?;
    let control_path = control::socket_path(&config.state_dir);
    if std::os::unix::net::UnixStream::connect(&control_path).is_ok() {
        return Err(GatewayError::Setup(format!(
            "another gateway already serves {} (its control socket answers); stop it, or use \
             another --dir",
            config.state_dir.display()
        )));
    }
    let _ = std::fs::remove_file(&control_path);
    let control_listener = std::os::unix::net::UnixListener::bind(&control_path).map_err(|e| {
        GatewayError::Setup(format!("control socket {}: {e}", control_path.display()))
    })?;
    let _ = std::fs::set_permissions(
        &control_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    );
    control_listener
        .set_nonblocking(true)
        .map_err(|e| GatewayError::Setup(e.to_string()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| GatewayError::Setup(e.to_string()))?;
    say(&format!(
        "listening on {listen}; policy {} (generation 1: {} rules, {} credentials); state {}; \
         servers verified against {} system roots{}",
        config.policy.display(),
        generation.policy.rules.len(),
        generation.policy.credentials.len(),
        config.state_dir.display(),
        generation.system_roots,
        if generation.extra_roots_pem.is_empty() {
            ""
        } else {
            " and gateway.upstream_ca"
        },
    ));

    let shared = Arc::new(Shared {
        generation: RwLock::new(Arc::new(generation)),
        cells: cells::Cells::default(),
        ca,
        hosts: config.hosts,
        limits: config.limits,
        listen,
        stats: Stats::default(),
        audit_log: config.audit,
        audit_failed: AtomicBool::new(false),
        policy_path: config.policy.clone(),
        state_dir: config.state_dir.clone(),
        started: rfc3339(SystemTime::now()),
        reload: Mutex::new(ReloadState::default()),
    });

    for i in 0..config.workers.max(1) {
        let l = listener
            .try_clone()
            .map_err(|e| GatewayError::Setup(format!("listener: {e}")))?;
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("gateway-{i}"))
            .spawn(move || worker(l, shared))
            .map_err(|e| GatewayError::Setup(format!("worker thread: {e}")))?;
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .build()
        .map_err(|e| GatewayError::Setup(e.to_string()))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let control = tokio::net::UnixListener::from_std(control_listener)
            .map_err(|e| GatewayError::Setup(e.to_string()))?;
        tokio::task::spawn_local(control::serve(control, shared.clone()));
        if let Some(fd) = config.ready {
            lifecycle::signal_ready(fd);
        }
        reload::watch(shared, config.poll, policy_stamp).await
    })
}

fn worker(listener: std::net::TcpListener, shared: Arc<Shared>) {
    // Blocking threads only read /proc to identify callers; each would keep an allocator arena
    // of its own, so a worker has few.
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build()
    else {
        say("a worker's event loop could not start");
        return;
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let Ok(listener) = TcpListener::from_std(listener) else {
            say("a worker could not use the listener");
            return;
        };
        tokio::task::spawn_local(async {
            loop {
                tokio::time::sleep(pool::IDLE_FOR / 2).await;
                pool::sweep();
            }
        });
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::task::spawn_local(conn::handle(stream, peer, shared.clone()));
                }
                Err(e) => {
                    if let Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) =
                        e.raw_os_error()
                    {
                        say(&format!("accept failed: {e}; pausing"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    });
}
