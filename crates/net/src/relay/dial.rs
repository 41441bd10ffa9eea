//! Resolve once, check every address, dial the checked address: the relay never hands a name to
//! the kernel after checking it, so DNS cannot answer differently between check and connect
//! (rebinding). With an upstream proxy, the relay opens a tunnel through it instead of dialing.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use nestbox_policy::host::canonical;
use nestbox_policy::{AddrVerdict, Host};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::Shared;
use super::head::{HeadLimits, Scan, Scanner};
use super::refusal::Refusal;
use super::request::Request;
use super::splice::send_all;
use crate::upstream::Upstream;

/// How long the relay waits for its own name lookup when an upstream will resolve anyway.
const ADVISORY_LOOKUP: Duration = Duration::from_secs(2);

/// An open connection towards the destination.
pub(crate) struct Route {
    pub stream: TcpStream,
    /// The address dialed: the destination's, or the upstream proxy's.
    pub addr: SocketAddr,
    /// Whether the connection goes through the upstream proxy.
    pub upstream: bool,
    /// Bytes the upstream sent after its `200` (belong to the tunnel).
    pub early: Vec<u8>,
}

/// Resolves, checks and dials `request`'s destination (or opens a tunnel through the upstream).
pub(crate) async fn open(shared: &Shared, request: &Request) -> Result<Route, Refusal> {
    let config = &shared.config;
    let (host, port, kind) = (request.host(), request.port(), request.kind());
    let upstream = config
        .upstream
        .as_ref()
        .filter(|u| u.applies_to(host, port));
    let limit = config.limits.connect_timeout;
    let deadline = Instant::now() + limit;

    let addrs = match host {
        Host::Addr(a) => vec![*a],
        Host::Name(name) => match config.hosts.get(name) {
            Some(list) => list.iter().map(|a| canonical(*a)).collect(),
            // The upstream resolves for itself; looking the name up here still catches a name
            // that points into a refused range, when this machine can resolve it at all.
            None if upstream.is_some() => {
                let soon = Instant::now() + ADVISORY_LOOKUP.min(limit);
                resolve(name, port, soon).await.unwrap_or_default()
            }
            None => match resolve(name, port, deadline).await {
                Ok(list) if !list.is_empty() => list,
                Ok(_) => return Err(Refusal::dns_failed(host, "no addresses")),
                Err(Lookup::TimedOut) => return Err(Refusal::connect_timeout(host, port, limit)),
                Err(Lookup::Failed(e)) => return Err(Refusal::dns_failed(host, &e.to_string())),
            },
        },
    };
    for addr in &addrs {
        match config.allowlist.check_addr(*addr, port, kind) {
            AddrVerdict::Denied(rule) => {
                return Err(Refusal::address_denied_by_rule(host, port, *addr, rule));
            }
            AddrVerdict::Refused(class) => {
                return Err(Refusal::address_refused(host, port, *addr, class, kind));
            }
            AddrVerdict::Opened(..) | AddrVerdict::Ordinary => {}
        }
    }

    match upstream {
        Some(up) => via_upstream(up, request, deadline, limit).await,
        None => direct(host, port, &addrs, deadline, limit).await,
    }
}

enum Lookup {
    TimedOut,
    Failed(io::Error),
}

/// The addresses of `name`, canonical and without duplicates, in the resolver's order.
async fn resolve(name: &str, port: u16, deadline: Instant) -> Result<Vec<IpAddr>, Lookup> {
    let found = timeout_at(deadline, tokio::net::lookup_host((name, port)))
        .await
        .map_err(|_| Lookup::TimedOut)?
        .map_err(Lookup::Failed)?;
    let mut out: Vec<IpAddr> = Vec::new();
    for sa in found {
        let ip = canonical(sa.ip());
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    Ok(out)
}

/// Dials the checked addresses in order until one answers.
async fn direct(
    host: &Host,
    port: u16,
    addrs: &[IpAddr],
    deadline: Instant,
    limit: Duration,
) -> Result<Route, Refusal> {
    let targets: Vec<SocketAddr> = addrs.iter().map(|a| SocketAddr::new(*a, port)).collect();
    let mut last_error = None;
    for target in &targets {
        match timeout_at(deadline, TcpStream::connect(target)).await {
            Err(_) => return Err(Refusal::connect_timeout(host, port, limit)),
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(Route {
                    stream,
                    addr: *target,
                    upstream: false,
                    early: Vec::new(),
                });
            }
            Ok(Err(e)) => last_error = Some(e),
        }
    }
    let why = last_error.map_or_else(|| "no address".to_string(), |e| e.to_string());
    Err(Refusal::connect_failed(host, port, &targets, &why))
}

/// Connects to the upstream proxy; for `CONNECT`, also asks it for the tunnel.
async fn via_upstream(
    up: &Upstream,
    request: &Request,
    deadline: Instant,
    limit: Duration,
) -> Result<Route, Refusal> {
    let addrs: Vec<SocketAddr> = match up.host() {
        Host::Addr(a) => vec![SocketAddr::new(*a, up.port())],
        Host::Name(n) => {
            match timeout_at(deadline, tokio::net::lookup_host((n.as_str(), up.port()))).await {
                Err(_) => return Err(Refusal::upstream_timeout(up, limit)),
                Ok(Err(e)) => return Err(Refusal::upstream_unreachable(up, &e.to_string())),
                Ok(Ok(found)) => found.collect(),
            }
        }
    };
    let mut last_error = None;
    let mut connected = None;
    for addr in addrs {
        match timeout_at(deadline, TcpStream::connect(addr)).await {
            Err(_) => return Err(Refusal::upstream_timeout(up, limit)),
            Ok(Ok(s)) => {
                connected = Some((s, addr));
                break;
            }
            Ok(Err(e)) => last_error = Some(e),
        }
    }
    let Some((stream, addr)) = connected else {
        let why = last_error.map_or_else(|| "no address".to_string(), |e| e.to_string());
        return Err(Refusal::upstream_unreachable(up, &why));
    };
    let _ = stream.set_nodelay(true);
    let mut route = Route {
        stream,
        addr,
        upstream: true,
        early: Vec::new(),
    };
    if let Request::Connect { host, port } = request {
        route.early =
            match timeout_at(deadline, upstream_connect(up, &route.stream, host, *port)).await {
                Err(_) => return Err(Refusal::upstream_timeout(up, limit)),
                Ok(result) => result?,
            };
    }
    Ok(route)
}

/// Sends `CONNECT host:port` to the upstream and reads its answer. Returns the bytes that came
/// after the answer's head.
async fn upstream_connect(
    up: &Upstream,
    stream: &TcpStream,
    host: &Host,
    port: u16,
) -> Result<Vec<u8>, Refusal> {
    let target = format!("{host}:{port}");
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = up.authorization() {
        req.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    req.push_str("\r\n");
    let lost = |e: io::Error| Refusal::upstream_unreachable(up, &e.to_string());
    send_all(stream, req.as_bytes()).await.map_err(lost)?;

    let limits = HeadLimits {
        max_line: 8 * 1024,
        max_head: 16 * 1024,
    };
    let mut buf = Vec::with_capacity(1024);
    let mut scanner = Scanner::default();
    loop {
        stream.readable().await.map_err(lost)?;
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(2048);
        }
        match stream.try_read_buf(&mut buf) {
            Ok(0) => {
                return Err(Refusal::upstream_unreachable(
                    up,
                    "it closed the connection before answering CONNECT",
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(lost(e)),
        }
        let end = match scanner.scan(&buf, limits) {
            Ok(Scan::Incomplete) => continue,
            Ok(Scan::Complete { end }) => end,
            Err(_) => return Err(Refusal::upstream_refused(up, "an oversized response head")),
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let status_line = head.lines().find(|l| !l.is_empty()).unwrap_or("").trim();
        let code = status_line.split(' ').nth(1).unwrap_or("");
        if !(status_line.starts_with("HTTP/1.") && code.len() == 3 && code.starts_with('2')) {
            if let Some(r) = gateway_refusal(up, stream, &head, &mut buf, end, code).await {
                return Err(r);
            }
            let shown: String = status_line.chars().take(120).collect();
            return Err(Refusal::upstream_refused(up, &shown));
        }
        return Ok(buf.split_off(end));
    }
}

/// When the upstream is a nestbox gateway that refused (`X-Nestbox-Denied`), its whole answer
/// (head and a body of at most 16 KiB), to be passed on to the client as it is.
async fn gateway_refusal(
    up: &Upstream,
    stream: &TcpStream,
    head: &str,
    buf: &mut Vec<u8>,
    end: usize,
    code: &str,
) -> Option<Refusal> {
    let field = |name: &str| {
        head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let reason = field("x-nestbox-denied")?;
    let status: u16 = code.parse().ok()?;
    let length: usize = field("content-length")?.parse().ok()?;
    if length > 16 * 1024 {
        return None;
    }
    while buf.len() < end + length {
        if stream.readable().await.is_err() {
            return None;
        }
        match stream.try_read_buf(buf) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
    let reason: String = reason.chars().take(64).collect();
    Some(Refusal::from_gateway(
        up,
        status,
        &reason,
        buf[..end + length].to_vec(),
    ))
}
