//! `nestbox relay` (run a relay: standalone, or re-executed by the launcher for one step) and
//! `nestbox presets` (list presets and what each expands to on this machine).
//!
//! Wiring, for `main.rs`:
//!
//! ```ignore
//! #[derive(clap::Subcommand)]
//! enum Command {
//!     /// Run a relay (the step's network exit).
//!     Relay(relay_cmd::RelayArgs),
//!     /// List network presets and what they expand to here.
//!     Presets(relay_cmd::PresetsArgs),
//! }
//! // ...
//! Command::Relay(args) => relay_cmd::run(args),
//! Command::Presets(args) => relay_cmd::presets(args),
//! ```

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nestbox_net::registry::{Discovery, expand_all};
use nestbox_net::{
    AuditLog, Lifecycle, Limits, RelayConfig, StaticHosts, Upstream, allowlist_from_policy, serve,
    upstream_from_env,
};
use nestbox_policy::units::parse_duration;
use nestbox_policy::{NetEntry, NetPolicy, PRESETS, find_preset};

/// `nestbox relay`: serve as a step's network exit.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Listen on this address (port 0 picks a free port; the address is printed on stderr).
    #[arg(long, value_name = "ADDR", required_unless_present_any = ["listen_fd", "control_fd"])]
    pub listen: Option<SocketAddr>,
    /// Serve an inherited, already listening TCP socket (made by the launcher, possibly inside
    /// the step's network namespace). It is never re-bound.
    #[arg(long, value_name = "N", conflicts_with = "listen")]
    pub listen_fd: Option<RawFd>,
    /// Write one byte to this fd (then close it) once connections are accepted.
    #[arg(long, value_name = "N")]
    pub ready_fd: Option<RawFd>,
    /// Started ahead of its step by `nestbox run`: configure, then receive the listener and the
    /// step's pidfd over this socket, and answer one byte on it once accepting.
    #[arg(long, value_name = "N", conflicts_with_all = ["listen", "listen_fd", "ready_fd"], hide = true)]
    pub control_fd: Option<RawFd>,
    /// Exit when this fd becomes readable: the step's pidfd. Repeatable.
    #[arg(long = "watch-pidfd", value_name = "N")]
    pub watch_pidfd: Vec<RawFd>,
    /// Let this target through: `host`, `*.suffix`, an IP address or CIDR range, optionally with
    /// `:port` or `:*` (without: 443 for CONNECT, 80 for plain HTTP). Repeatable.
    #[arg(long, value_name = "ENTRY")]
    pub allow: Vec<String>,
    /// Refuse this target even when allowed (without a port: every port). Repeatable.
    #[arg(long, value_name = "ENTRY")]
    pub deny: Vec<String>,
    /// Allow the hosts of a preset (`nestbox presets` lists them). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub preset: Vec<String>,
    /// Chain through this proxy: `http://[user:pass@]host:port`. Without this flag the relay
    /// chains through the proxy named by `https_proxy`/`HTTPS_PROXY`/`all_proxy`/`ALL_PROXY`
    /// (honouring `no_proxy`), if any.
    #[arg(long, value_name = "URL", conflicts_with = "no_upstream")]
    pub upstream: Option<String>,
    /// Dial directly, even when the environment names a proxy.
    #[arg(long)]
    pub no_upstream: bool,
    /// Append one JSON line per decision to this file.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// The step id written into audit lines.
    #[arg(long, value_name = "ID")]
    pub step_id: Option<String>,
    /// Most tunnels and fetches open at once (more get 503).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_tunnels)]
    pub max_tunnels: usize,
    /// Answer this name without DNS: `host=addr[,addr]` (the address is still checked).
    /// Repeatable.
    #[arg(long, value_name = "HOST=ADDR")]
    pub resolve: Vec<String>,
    /// Time a client has to send its request head (e.g. `10s`, `500ms`).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub header_timeout: Duration,
    /// Time to resolve and connect, directly or through the upstream.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub connect_timeout: Duration,
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

/// `nestbox presets`: list presets and what each expands to here.
#[derive(Debug, Args)]
pub struct PresetsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only these presets (default: all).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

fn fail(message: &str) -> i32 {
    let _ = writeln!(std::io::stderr(), "nestbox relay: {message}");
    1
}

/// Runs `nestbox relay`; returns the process exit code.
pub fn run(args: RelayArgs) -> i32 {
    let started = configure(&args).and_then(|(listener, config, mut lifecycle)| {
        let listener = match (listener, args.control_fd) {
            (Some(l), _) => l,
            (None, Some(fd)) => {
                // Configured (presets discovered) while the launcher prepared the step; now
                // the step exists: take its listener and pidfd, answer on the same socket.
                let control = inherited(fd, "--control-fd")?;
                let (listener, step) = receive_step(&control)?;
                lifecycle.watch.push(step);
                lifecycle.ready = Some(control);
                listener
            }
            (None, None) => return Err("give --listen ADDR or --listen-fd N".into()),
        };
        serve(listener, config, lifecycle).map_err(|e| e.to_string())
    });
    match started {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

/// Receives `(listener, step pidfd)` from the launcher over the control socket.
fn receive_step(control: &OwnedFd) -> Result<(TcpListener, OwnedFd), String> {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain data; recvmsg fills it and the buffers it points to.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space);
    // SAFETY: valid msghdr.
    let n = unsafe { libc::recvmsg(control.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return Err("the launcher went away before its step started".into());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages recvmsg filled.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let count =
                ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for i in 0..count {
                fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
            }
        }
    }
    if fds.len() != 2 {
        return Err(format!(
            "expected a listener and a pidfd from the launcher, got {} descriptors",
            fds.len()
        ));
    }
    let step = fds.pop().expect("two descriptors");
    let listener = fds.pop().expect("two descriptors");
    check_listening(listener.as_raw_fd())?;
    Ok((TcpListener::from(listener), step))
}

fn configure(args: &RelayArgs) -> Result<(Option<TcpListener>, RelayConfig, Lifecycle), String> {
    let net = NetPolicy {
        allow: NetEntry::from_flag(&args.allow, "--allow"),
        deny: NetEntry::from_flag(&args.deny, "--deny"),
        presets: NetEntry::from_flag(&args.preset, "--preset"),
        ..NetPolicy::default()
    };
    let discovery = Discovery::from_process();
    let allowlist = allowlist_from_policy(&net, &discovery).map_err(|e| e.to_string())?;
    let upstream = if args.no_upstream {
        None
    } else if let Some(url) = &args.upstream {
        Some(Upstream::parse(url).map_err(|e| format!("--upstream: {e}"))?)
    } else {
        upstream_from_env(|name| std::env::var(name).ok())
            .map_err(|e| format!("{e} (from the environment; --no-upstream ignores it)"))?
    };
    let mut hosts = StaticHosts::default();
    for entry in &args.resolve {
        hosts.add(entry).map_err(|e| format!("--resolve {e}"))?;
    }
    let audit = match &args.audit {
        Some(path) => {
            Some(AuditLog::open(path).map_err(|e| format!("--audit {}: {e}", path.display()))?)
        }
        None => None,
    };

    let listener = match (args.listen, args.listen_fd) {
        (Some(addr), _) => {
            let l = TcpListener::bind(addr).map_err(|e| format!("--listen {addr}: {e}"))?;
            if let Ok(bound) = l.local_addr() {
                let _ = writeln!(std::io::stderr(), "nestbox relay: listening on {bound}");
            }
            Some(l)
        }
        (None, Some(fd)) => Some(TcpListener::from(inherited(fd, "--listen-fd")?)),
        (None, None) if args.control_fd.is_some() => None,
        (None, None) => return Err("give --listen ADDR or --listen-fd N".into()),
    };
    if let Some(fd) = args.listen_fd {
        check_listening(fd)?;
    }
    let lifecycle = Lifecycle {
        ready: args
            .ready_fd
            .map(|fd| inherited(fd, "--ready-fd"))
            .transpose()?,
        watch: args
            .watch_pidfd
            .iter()
            .map(|&fd| inherited(fd, "--watch-pidfd"))
            .collect::<Result<_, _>>()?,
    };
    if allowlist.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "nestbox relay: no --allow or --preset given: every request will be refused"
        );
    }
    if let Some(up) = &upstream {
        let _ = writeln!(std::io::stderr(), "nestbox relay: chaining through {up}");
    }

    let mut config = RelayConfig::new(allowlist);
    config.upstream = upstream;
    config.step_id.clone_from(&args.step_id);
    config.audit = audit;
    config.hosts = hosts;
    config.limits.max_tunnels = args.max_tunnels;
    config.limits.head_timeout = args.header_timeout;
    config.limits.connect_timeout = args.connect_timeout;
    Ok((listener, config, lifecycle))
}

/// Takes ownership of an fd inherited from the launcher, after checking it is open.
fn inherited(fd: RawFd, flag: &str) -> Result<OwnedFd, String> {
    // SAFETY: F_GETFD only reads the fd's flags; -1 means it is not open.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(format!("{flag} {fd}: not an open file descriptor above 2"));
    }
    // Inherited without close-on-exec: set it, so the package tools preset discovery runs never
    // hold the listener or the pidfds.
    // SAFETY: F_SETFD on an fd we now own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the fd is open and was handed to this process to own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A listening TCP socket, or a precise error: serving anything else would hang or misbehave.
fn check_listening(fd: RawFd) -> Result<(), String> {
    let get = |opt: libc::c_int| -> Option<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `value`, which we own.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    };
    match (get(libc::SO_TYPE), get(libc::SO_ACCEPTCONN)) {
        (Some(libc::SOCK_STREAM), Some(1)) => Ok(()),
        (None, _) => Err(format!("--listen-fd {fd}: not a socket")),
        (Some(libc::SOCK_STREAM), _) => {
            Err(format!("--listen-fd {fd}: the socket is not listening"))
        }
        _ => Err(format!("--listen-fd {fd}: not a TCP stream socket")),
    }
}

/// Runs `nestbox presets`; returns the process exit code.
pub fn presets(args: PresetsArgs) -> i32 {
    let chosen: Vec<&'static nestbox_policy::Preset> = if args.names.is_empty() {
        PRESETS.iter().collect()
    } else {
        let mut out = Vec::new();
        for name in &args.names {
            match find_preset(name) {
                Ok(p) => out.push(p),
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "nestbox presets: {e}");
                    return 2;
                }
            }
        }
        out
    };
    let discovery = Discovery::from_process();
    let expansions = expand_all(&chosen, &discovery);
    let mut out = std::io::stdout().lock();
    if args.json {
        let list: Vec<serde_json::Value> = expansions
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.preset.name,
                    "kind": e.preset.kind.as_str(),
                    "summary": e.preset.summary,
                    "discovery": e.preset.discovery,
                    "hosts": e.hosts.iter().map(|h| serde_json::json!({
                        "entry": h.rule.to_string(),
                        "via": h.via,
                    })).collect::<Vec<_>>(),
                    "notes": e.notes,
                })
            })
            .collect();
        let _ = writeln!(out, "{}", serde_json::Value::Array(list));
        return 0;
    }
    for e in &expansions {
        let _ = writeln!(
            out,
            "{:<10} {:<9} {}",
            e.preset.name,
            e.preset.kind.as_str(),
            e.preset.summary
        );
        for h in &e.hosts {
            let _ = writeln!(out, "    {:<36} {}", h.rule.to_string(), h.via);
        }
        for n in &e.notes {
            let _ = writeln!(out, "    note: {n}");
        }
    }
    0
}
