//! A step with its relay: choosing the network mode, preparing the listener, and starting the
//! relay detached with a readiness handshake before the step may run (DESIGN section 2).
//!
//! This module runs in the launcher, before and around the fork, so it is synchronous and
//! starts no thread: the relay is a separate process (`nestbox relay`, re-executed from this
//! binary), watching the launcher's and the step's pidfds so it exits with them.

use std::ffi::{CString, OsString};
use std::io::Read;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use nestbox_cage::report::NetworkReport;
use nestbox_cage::{CageError, Network, Started};
use nestbox_policy::proxy_env::is_proxy_var;
use nestbox_policy::{NetMode, NetPolicy};

use crate::config::allowlist_from_policy;
use crate::gateway::{Registration, register_cell};
use crate::registry::Discovery;
use crate::upstream::{Upstream, upstream_from_env};

/// Where the relay listens inside the step's own network namespace.
pub const NETNS_RELAY_PORT: u16 = 3128;

/// How long the launcher waits for the relay to accept (preset discovery asks pip, npm...).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Which upstream proxy the relay chains through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum UpstreamChoice {
    /// The launcher's own `HTTPS_PROXY`/`https_proxy` (or `ALL_PROXY`), if any: the default.
    #[default]
    FromEnvironment,
    /// This URL (`--upstream`, or `upstream` in the policy).
    Explicit(String),
    /// Dial directly (`--no-upstream`).
    None,
}

/// `nestbox run --gateway`: the relay chains to a gateway, which knows the cell by a token.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// The gateway's proxy URL (`http://127.0.0.1:3129`).
    pub url: String,
    /// The gateway's state directory (where its control socket is).
    pub dir: PathBuf,
    /// The cell's name, as the gateway policy's `cell = "..."` names it.
    pub cell_name: String,
    /// Credentials the step gets placeholders for (`--credential`).
    pub credentials: Vec<String>,
}

/// The environment variables that point TLS clients at a CA bundle.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
];

/// Where system roots are found, in order.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The placeholder a step holds instead of credential `name`.
pub fn placeholder(name: &str) -> String {
    format!("nestbox:resolve:env:{name}")
}

/// What the launcher was asked, beyond the policy's `[net]` section.
#[derive(Clone, Debug, Default)]
pub struct CellOptions {
    /// Which upstream proxy the relay chains through.
    pub upstream: UpstreamChoice,
    /// Audit log for the relay (one JSON line per decision).
    pub audit: Option<PathBuf>,
    /// The launcher's environment: the relay reads registry settings and the default upstream
    /// from it. It never reaches the step.
    pub caller_env: Vec<(OsString, OsString)>,
    /// Chain to a gateway as a registered cell.
    pub gateway: Option<GatewayOptions>,
}

/// The network side of one step, ready to be handed to the cage.
pub struct CellNetwork {
    /// For [`nestbox_cage::StepRequest::network`].
    pub network: Network,
    /// Proxy variables for [`nestbox_cage::StepRequest::extra_env`].
    pub extra_env: Vec<(String, OsString)>,
    /// Files the step must be able to read (the CA bundle with the gateway's CA).
    pub read_paths: Vec<PathBuf>,
    mode: NetMode,
    port_listener: Option<TcpListener>,
    relay_args: Vec<String>,
    relay_env: Vec<(OsString, OsString)>,
    registration: Option<Registration>,
    bundle_dir: Option<PathBuf>,
    /// A relay started ahead of the step ([`CellNetwork::start_relay_early`]): the socket that
    /// will carry it the listener and the step's pidfd, and its stderr.
    early: Option<(OwnedFd, OwnedFd)>,
}

impl Drop for CellNetwork {
    fn drop(&mut self) {
        if let Some(dir) = &self.bundle_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Writes `system roots + gateway CA + extra roots` into a fresh directory the step can read.
fn write_bundle(reg: &Registration) -> Result<(PathBuf, PathBuf), CageError> {
    let mut pem = String::new();
    for p in SYSTEM_BUNDLES {
        if let Ok(text) = std::fs::read_to_string(p) {
            pem.push_str(&text);
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
            break;
        }
    }
    pem.push_str(&reg.ca_pem);
    if !pem.ends_with('\n') {
        pem.push('\n');
    }
    pem.push_str(&reg.extra_roots_pem);
    let dir = std::env::temp_dir().join(format!("nestbox-trust-{}", nestbox_cage::new_step_id()));
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(|e| CageError::Setup(format!("CA bundle dir {}: {e}", dir.display())))?;
    let file = dir.join("ca-bundle.pem");
    std::fs::write(&file, pem)
        .map_err(|e| CageError::Setup(format!("CA bundle {}: {e}", file.display())))?;
    let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644));
    Ok((dir, file))
}

/// Whether this process can create a network namespace (directly as root, or in a new user
/// namespace), asked of the kernel in a throwaway child.
pub fn netns_available() -> bool {
    nestbox_cage::namespaces_likely_available()
}

fn config_error(e: impl std::fmt::Display) -> CageError {
    CageError::Policy(e.to_string())
}

impl CellNetwork {
    /// Plans the network of a step. `net` is the effective policy's `[net]` section (with the
    /// command-line entries already added). Errors are policy errors (exit 125).
    pub fn plan(net: &NetPolicy, opts: &CellOptions) -> Result<CellNetwork, CageError> {
        // Validate every entry now, with its origin, before anything starts. Presets are only
        // checked by name here; the relay expands them from the tools' own configuration.
        allowlist_from_policy(net, &Discovery::offline()).map_err(config_error)?;

        let env_lookup = |name: &str| {
            opts.caller_env
                .iter()
                .find(|(k, _)| k.as_bytes() == name.as_bytes())
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let upstream: Option<Upstream> = match &opts.upstream {
            UpstreamChoice::None => None,
            UpstreamChoice::Explicit(url) => Some(Upstream::parse(url).map_err(config_error)?),
            UpstreamChoice::FromEnvironment => upstream_from_env(env_lookup).map_err(|e| {
                CageError::Policy(format!(
                    "{e} (taken from this environment; --no-upstream ignores it)"
                ))
            })?,
        };
        // The relay gets the launcher's environment for registry discovery, with the upstream
        // passed as `https_proxy` (never on its command line, which the step could read in
        // /proc) and every other proxy variable removed.
        let mut relay_env: Vec<(OsString, OsString)> = opts
            .caller_env
            .iter()
            .filter(|(k, _)| !is_proxy_var(k.as_bytes()))
            .cloned()
            .collect();
        match &opts.upstream {
            UpstreamChoice::Explicit(url) => relay_env.push(("https_proxy".into(), url.into())),
            UpstreamChoice::FromEnvironment => {
                for (k, v) in &opts.caller_env {
                    if is_proxy_var(k.as_bytes()) {
                        relay_env.push((k.clone(), v.clone()));
                    }
                }
            }
            UpstreamChoice::None => {}
        }

        let mode = match net.mode {
            NetMode::Auto if netns_available() => NetMode::Netns,
            NetMode::Auto => NetMode::Port,
            other => other,
        };
        let mut relay_args: Vec<String> = Vec::new();
        let mut extra_env: Vec<(String, OsString)> = Vec::new();
        let mut read_paths = Vec::new();
        let mut registration = None;
        let mut bundle_dir = None;
        let mut gateway_report = serde_json::Value::Null;
        let mut upstream = upstream;
        if let Some(gw) = &opts.gateway {
            let gw_url = Upstream::parse(&gw.url)
                .map_err(|e| CageError::Policy(format!("--gateway: {e}")))?;
            if gw_url.authorization().is_some() {
                return Err(CageError::Policy(
                    "--gateway: give the gateway's address without credentials (the cell's token is added by nestbox)".into(),
                ));
            }
            let reg = register_cell(&gw.dir, &gw.cell_name, "", &gw.credentials)
                .map_err(|e| CageError::Policy(format!("--gateway: {e}")))?;
            let asked = format!("{}:{}", gw_url.host(), gw_url.port());
            if reg.listen != asked {
                return Err(CageError::Policy(format!(
                    "--gateway {}: the gateway whose control socket is in {} listens on {}; give that address, or --gateway-dir of the gateway at {asked}",
                    gw.url,
                    gw.dir.display(),
                    reg.listen
                )));
            }
            // The relay's upstream is the gateway, with the cell's token as the proxy password.
            // It travels in the relay's environment only, never on a command line.
            let url = format!("http://cell:{}@{}", reg.token, reg.listen);
            upstream = Some(Upstream::parse(&url).map_err(config_error)?);
            relay_env.retain(|(k, _)| !is_proxy_var(k.as_bytes()));
            relay_env.push(("https_proxy".into(), url.into()));
            for entry in &reg.allow {
                relay_args.push(format!("--allow={entry}"));
            }
            for name in &gw.credentials {
                extra_env.push((name.clone(), placeholder(name).into()));
            }
            let (dir, file) = write_bundle(&reg)?;
            for var in CA_BUNDLE_VARS {
                extra_env.push((var.to_string(), file.clone().into_os_string()));
            }
            gateway_report = serde_json::json!({
                "url": gw.url,
                "cell": gw.cell_name,
                "credentials": gw.credentials,
                "allowed_by_gateway_policy": reg.allow,
                "ca_bundle": file.display().to_string(),
            });
            read_paths.push(file);
            bundle_dir = Some(dir);
            registration = Some(reg);
        }
        for e in &net.allow {
            relay_args.push(format!("--allow={}", e.text));
        }
        for e in &net.deny {
            relay_args.push(format!("--deny={}", e.text));
        }
        for e in &net.presets {
            relay_args.push(format!("--preset={}", e.text));
        }
        if upstream.is_none() {
            relay_args.push("--no-upstream".into());
        }
        if let Some(a) = &opts.audit {
            relay_args.push(format!("--audit={}", a.display()));
        }

        let mut notes = Vec::new();
        if let Some(reg) = &registration
            && reg.allow.is_empty()
            && net.allow.is_empty()
            && net.presets.is_empty()
        {
            notes.push(format!(
                "gateway: its policy grants cell `{}` no destination; every request will be refused",
                opts.gateway.as_ref().map_or("", |g| g.cell_name.as_str())
            ));
        }
        let (network_port, port_listener) = match mode {
            NetMode::Netns => {
                notes.push("netns: the step has its own network namespace holding only lo; its one way out is the relay, which accepts inside it and dials outside. A program that ignores the proxy variables has no network at all".to_string());
                (NETNS_RELAY_PORT, None)
            }
            _ => {
                let listener = bind_relay_port(&net.deny_ports)?;
                let port = listener
                    .local_addr()
                    .map_err(|e| CageError::Setup(format!("relay listener: {e}")))?
                    .port();
                notes.push(format!("port mode: Landlock lets the step connect to TCP port {port} only, and nothing else. Landlock port rules cannot tell hosts apart: port {port} on any other host the outer environment routes to is reachable too, so this mode relies on the outer sandbox having no direct route out"));
                (port, Some(listener))
            }
        };
        let relay = serde_json::json!({
            "listen": format!("127.0.0.1:{network_port}"),
            "allow": net.allow.iter().map(|e| e.text.clone()).collect::<Vec<_>>(),
            "deny": net.deny.iter().map(|e| e.text.clone()).collect::<Vec<_>>(),
            "presets": net.presets.iter().map(|e| e.text.clone()).collect::<Vec<_>>(),
            "deny_ports": net.deny_ports,
            "upstream": upstream.as_ref().map(|u| u.to_string()),
            "upstream_source": match &opts.upstream {
                UpstreamChoice::Explicit(_) => "explicit",
                UpstreamChoice::FromEnvironment if upstream.is_some() => "launcher environment (HTTPS_PROXY)",
                UpstreamChoice::FromEnvironment => "none in the launcher environment",
                UpstreamChoice::None => "disabled (--no-upstream)",
            },
            "audit": opts.audit.as_ref().map(|a| a.display().to_string()),
            "gateway": gateway_report,
        });
        let report = NetworkReport {
            mode: match mode {
                NetMode::Netns => "netns".into(),
                _ => "port".into(),
            },
            notes,
            relay: Some(relay),
        };
        let network = match mode {
            NetMode::Netns => Network::Netns {
                port: network_port,
                report,
            },
            _ => Network::Ports {
                connect: vec![network_port],
                report,
            },
        };
        let mut env: Vec<(String, OsString)> = nestbox_policy::proxy_env::relay_env(network_port)
            .into_iter()
            .map(|(k, v)| (k, v.into()))
            .collect();
        env.extend(extra_env);
        Ok(CellNetwork {
            network,
            extra_env: env,
            read_paths,
            mode,
            port_listener,
            relay_args,
            relay_env,
            registration,
            bundle_dir,
            early: None,
        })
    }

    /// The network mode chosen (`Netns` or `Port`).
    pub fn mode(&self) -> NetMode {
        self.mode
    }

    /// Starts the relay for the step `started` and waits until it accepts. Call it from the
    /// cage's `before_exec` hook: the step runs only once this returns `Ok`.
    /// Starts the relay before the step is prepared, so that its start-up (and preset
    /// discovery, which asks pip and npm) overlaps the launcher's own preparation. The relay
    /// configures itself, then waits for [`CellNetwork::start_relay`] to hand it the listener and
    /// the step's pidfd. Optional: `start_relay` starts it itself when this was not called.
    pub fn start_relay_early(&mut self, step_id: &str) -> Result<(), CageError> {
        if let Some(reg) = &mut self.registration {
            reg.set_step(step_id)
                .map_err(|e| CageError::Setup(format!("gateway: {e}")))?;
        }
        let launcher = nestbox_cage::pidfd_open(std::process::id() as libc::pid_t)
            .map_err(|e| CageError::Setup(format!("pidfd of the launcher: {e}")))?;
        let (ours, theirs) = seqpacket_pair()?;
        let (err_r, err_w) = pipe()?;
        let mut argv: Vec<CString> = vec![c"nestbox".into(), c"relay".into()];
        argv.push(cstring("--control-fd=3")?);
        argv.push(cstring("--watch-pidfd=4")?);
        argv.push(cstring(&format!("--step-id={step_id}"))?);
        for a in &self.relay_args {
            argv.push(cstring(a)?);
        }
        let envp = self
            .relay_env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv).map_err(|_| CageError::Setup("NUL in the environment".into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        nestbox_cage::detach::spawn_detached(
            c"/proc/self/exe",
            &argv,
            &envp,
            &[theirs.as_raw_fd(), launcher.as_raw_fd()],
            Some(err_w.as_raw_fd()),
        )
        .map_err(|e| CageError::Setup(format!("starting the relay: {e}")))?;
        self.early = Some((ours, err_r));
        Ok(())
    }

    /// Hands the relay the step `started` (its listener and pidfd) and waits until it accepts.
    /// Call it from the cage's `before_exec` hook: the step runs only once this returns `Ok`.
    pub fn start_relay(&mut self, started: Started<'_>, step_id: &str) -> Result<(), CageError> {
        if self.early.is_none() {
            self.start_relay_early(step_id)?;
        }
        let (control, err_r) = self.early.take().expect("the relay was started");
        let listener: OwnedFd = match (started.listener, self.port_listener.take()) {
            (Some(fd), _) => fd,
            (None, Some(l)) => OwnedFd::from(l),
            (None, None) => return Err(CageError::Setup("no relay listener was prepared".into())),
        };
        let sent = send_fds(&control, &[listener.as_raw_fd(), started.pidfd.as_raw_fd()]);
        drop(listener);
        if sent && wait_readable(&control, READY_TIMEOUT) {
            let mut byte = [0u8; 1];
            // SAFETY: one byte into a stack buffer.
            let n = unsafe { libc::read(control.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
            if n == 1 {
                return Ok(());
            }
        }
        // The relay refused its configuration or died: say what it said.
        drop(control);
        let mut message = String::new();
        let _ = std::fs::File::from(err_r).read_to_string(&mut message);
        let message = message.trim();
        Err(CageError::Setup(if message.is_empty() {
            "the relay did not become ready".to_string()
        } else {
            message.trim_start_matches("nestbox relay: ").to_string()
        }))
    }
}

/// A connected pair of close-on-exec SOCK_SEQPACKET sockets.
fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), CageError> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two descriptors we then own.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(CageError::Setup(format!(
            "socketpair: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `fds` in one SCM_RIGHTS message (with one byte of data).
fn send_fds(sock: &OwnedFd, fds: &[std::os::fd::RawFd]) -> bool {
    let mut byte = [b'S'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let payload = std::mem::size_of_val(fds) as u32;
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain data; the control buffer is large enough for a few descriptors.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(payload) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        libc::sendmsg(sock.as_raw_fd(), &msg, 0) == 1
    }
}

fn cstring(s: &str) -> Result<CString, CageError> {
    CString::new(s).map_err(|_| CageError::Policy(format!("NUL byte in relay argument `{s}`")))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), CageError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(CageError::Setup(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn wait_readable(fd: &OwnedFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    n == 1
}

/// Binds the relay's port-mode listener on 127.0.0.1, never on a port the policy denies.
fn bind_relay_port(deny_ports: &[u16]) -> Result<TcpListener, CageError> {
    for _ in 0..20 {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| CageError::Setup(format!("binding the relay listener: {e}")))?;
        let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
        if !deny_ports.contains(&port) {
            return Ok(l);
        }
    }
    Err(CageError::Policy(format!(
        "could not find a relay port outside the denied ports {deny_ports:?}"
    )))
}
