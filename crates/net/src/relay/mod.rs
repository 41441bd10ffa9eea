//! The relay server: accept, read the request head, decide, dial, then tunnel or fetch. One
//! thread, one task per connection; see the crate documentation for the checks in order.

mod dial;
pub(crate) mod head;
pub(crate) mod lifecycle;
pub(crate) mod refusal;
pub(crate) mod request;
pub mod sni;
pub(crate) mod splice;
mod this_host;
pub(crate) mod tunnel;

use std::cell::Cell;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use nestbox_policy::{Host, HostVerdict};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout};

pub use lifecycle::raise_nofile_limit;

use crate::audit::{Decision, Record, rfc3339};
use crate::config::RelayConfig;
use head::{HeadError, HeadLimits};
use refusal::Refusal;
use request::Request;
use tunnel::{Counters, End};

/// How the relay's life is tied to its step's.
#[derive(Debug, Default)]
pub struct Lifecycle {
    /// Written one byte (and closed) once the relay accepts connections.
    pub ready: Option<OwnedFd>,
    /// The relay exits when any of these becomes readable: the step's pidfd (readable when the
    /// process exits), or a pipe whose write end closes.
    pub watch: Vec<OwnedFd>,
}

/// Why the relay could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener could not be registered with the event loop.
    #[error("the relay's listening socket cannot be used: {0}")]
    Listener(io::Error),
    /// A watched fd cannot be polled.
    #[error("a watched fd cannot be polled (pidfds and pipes can): {0}")]
    Watch(io::Error),
    /// The runtime could not start.
    #[error("the relay's event loop could not start: {0}")]
    Runtime(io::Error),
}

/// Runs the relay on an already-bound, listening socket until a watched fd becomes readable
/// (forever when there is none). The socket is used as it is: never re-bound, never queried for
/// anything that depends on the network namespace it was created in, so a listener made inside
/// the step's namespace works from outside it.
///
/// On return, every connection still open is closed and gets its audit line.
pub fn serve(
    listener: std::net::TcpListener,
    mut config: RelayConfig,
    lifecycle: Lifecycle,
) -> Result<(), ServeError> {
    config
        .allowlist
        .set_this_host(this_host::interface_addresses());
    if let Err(e) = raise_nofile_limit() {
        warn(&format!("could not raise the open-file limit: {e}"));
    }
    lifecycle::ignore_sigpipe();
    listener
        .set_nonblocking(true)
        .map_err(ServeError::Listener)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        // name lookups (getaddrinfo) block: a few threads for them, not one per burst request
        .max_blocking_threads(8)
        .build()
        .map_err(ServeError::Runtime)?;
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&runtime, run(listener, config, lifecycle));
    // Dropping the task set drops every open connection; their audit lines are written here.
    drop(local);
    drop(runtime);
    result
}

/// State shared by every connection of one relay.
pub(crate) struct Shared {
    pub config: RelayConfig,
    tunnels: Cell<usize>,
    pending: Cell<usize>,
    audit_failed: Cell<bool>,
}

async fn run(
    listener: std::net::TcpListener,
    config: RelayConfig,
    lifecycle: Lifecycle,
) -> Result<(), ServeError> {
    let listener = TcpListener::from_std(listener).map_err(ServeError::Listener)?;
    let watch = lifecycle::Watch::new(lifecycle.watch).map_err(ServeError::Watch)?;
    if let Some(fd) = lifecycle.ready {
        lifecycle::signal_ready(fd);
    }
    let shared = Rc::new(Shared {
        config,
        tunnels: Cell::new(0),
        pending: Cell::new(0),
        audit_failed: Cell::new(false),
    });
    loop {
        tokio::select! {
            biased;
            _ = watch.any_readable() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::task::spawn_local(handle(stream, peer, shared.clone()));
                }
                Err(e) => accept_failed(e).await,
            },
        }
    }
}

/// Out of fds or memory: wait a little instead of spinning on a listener that stays readable.
async fn accept_failed(e: io::Error) {
    // other errors (a client that reset before accept) concern one connection only
    if let Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) = e.raw_os_error() {
        warn(&format!("accept failed: {e}; pausing"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes a line to stderr, ignoring failure (stderr may be closed or a dead pipe when the
/// relay runs detached).
fn warn(message: &str) {
    let _ = writeln!(io::stderr(), "nestbox relay: {message}");
}

/// A counted slot (pending head or open tunnel) released on drop.
struct Slot<'a>(&'a Cell<usize>);

impl<'a> Slot<'a> {
    fn take(counter: &'a Cell<usize>, max: usize) -> Option<Slot<'a>> {
        if counter.get() >= max {
            return None;
        }
        counter.set(counter.get() + 1);
        Some(Slot(counter))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// What is known about one connection; written to the audit log when dropped (at the end of
/// the connection, or when the relay shuts down under it).
struct Entry<'a> {
    shared: &'a Shared,
    started: Instant,
    silent: bool,
    method: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    addr: Option<String>,
    decision: Decision,
    rule: Option<String>,
    reason: Option<&'static str>,
    detail: Option<String>,
    status: Option<u16>,
    counters: Counters,
}

impl<'a> Entry<'a> {
    fn new(shared: &'a Shared) -> Entry<'a> {
        Entry {
            shared,
            started: Instant::now(),
            silent: false,
            method: None,
            host: None,
            port: None,
            addr: None,
            decision: Decision::Deny,
            rule: None,
            reason: None,
            detail: None,
            status: None,
            counters: Counters::default(),
        }
    }

    fn refused(&mut self, refusal: &Refusal) {
        self.decision = refusal.decision;
        self.reason = Some(refusal.reason);
        self.detail = Some(refusal.detail.clone());
        self.status = Some(refusal.status);
        if refusal.rule.is_some() {
            self.rule.clone_from(&refusal.rule);
        }
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let Some(log) = &self.shared.config.audit else {
            return;
        };
        if self.silent {
            return;
        }
        let record = Record {
            time: rfc3339(SystemTime::now()),
            step: self.shared.config.step_id.clone(),
            method: self.method.take(),
            host: self.host.take(),
            port: self.port,
            addr: self.addr.take(),
            decision: self.decision,
            rule: self.rule.take(),
            reason: self.reason.map(str::to_string),
            detail: self.detail.take(),
            status: self.status,
            bytes_up: self.counters.up.get(),
            bytes_down: self.counters.down.get(),
            duration_ms: self.started.elapsed().as_millis() as u64,
        };
        if let Err(e) = log.write(&record)
            && !self.shared.audit_failed.replace(true)
        {
            warn(&format!("cannot write the audit log (reported once): {e}"));
        }
    }
}

/// Serves one connection from accept to close.
async fn handle(client: TcpStream, _peer: SocketAddr, shared: Rc<Shared>) {
    let shared = &*shared;
    let limits = shared.config.limits;
    let mut entry = Entry::new(shared);

    let Some(pending) = Slot::take(&shared.pending, limits.max_pending) else {
        // A flood of half-sent heads: close without reading, keep the relay responsive.
        entry.reason = Some("too_many_pending");
        entry.detail = Some(format!(
            "more than {} connections were still sending their request head",
            limits.max_pending
        ));
        return;
    };
    let head_limits = HeadLimits {
        max_line: limits.max_request_line,
        max_head: limits.max_head,
    };
    let read = timeout(limits.head_timeout, head::read(&client, head_limits)).await;
    drop(pending);
    let (head, early) = match read {
        Ok(Ok(found)) => found,
        Err(_) => {
            return refuse(&client, entry, Refusal::header_timeout(limits.head_timeout)).await;
        }
        Ok(Err(HeadError::Refuse(r))) => return refuse(&client, entry, r).await,
        Ok(Err(HeadError::Empty)) => {
            entry.silent = true;
            return;
        }
        Ok(Err(HeadError::Truncated)) => {
            entry.reason = Some("truncated_request");
            entry.detail = Some("the client closed in the middle of its request head".into());
            return;
        }
        Ok(Err(HeadError::Io(e))) => {
            entry.reason = Some("client_error");
            entry.detail = Some(e.to_string());
            return;
        }
    };
    entry.method = Some(head.method.clone());
    let request = match request::interpret(&head) {
        Ok(r) => r,
        Err(r) => {
            entry.host = Some(head.target.chars().take(256).collect());
            return refuse(&client, entry, r).await;
        }
    };
    let (host, port, kind) = (request.host(), request.port(), request.kind());
    entry.host = Some(host.to_string());
    entry.port = Some(port);

    match shared.config.allowlist.check_host(host, port, kind) {
        HostVerdict::Allowed(rule) => entry.rule = Some(rule.to_string()),
        HostVerdict::Denied(rule) => {
            return refuse(&client, entry, Refusal::denied_by_rule(host, port, rule)).await;
        }
        HostVerdict::NotListed => {
            let r = match host {
                Host::Addr(_) => Refusal::ip_literal_not_allowed(host, port, kind),
                Host::Name(_) => Refusal::host_not_allowed(host, port, kind),
            };
            return refuse(&client, entry, r).await;
        }
    }
    let Some(_tunnel) = Slot::take(&shared.tunnels, limits.max_tunnels) else {
        return refuse(
            &client,
            entry,
            Refusal::too_many_tunnels(limits.max_tunnels),
        )
        .await;
    };
    let route = match dial::open(shared, &request).await {
        Ok(route) => route,
        Err(r) => return refuse(&client, entry, r).await,
    };
    entry.addr = Some(route.addr.to_string());
    if route.upstream {
        entry.detail = Some("via upstream proxy".into());
    }

    let ended = match request {
        Request::Connect { ref host, .. } => {
            drop(head);
            if let Err(e) = splice::send_established(&client).await {
                entry.reason = Some("client_error");
                entry.detail = Some(e.to_string());
                return;
            }
            entry.decision = Decision::Allow;
            entry.status = Some(200);
            tunnel::connect(
                &client,
                &route.stream,
                host,
                early,
                route.early,
                &entry.counters,
                limits.head_timeout,
            )
            .await
        }
        Request::Http {
            ref host,
            port,
            ref path,
        } => {
            drop(early);
            let upstream = if route.upstream {
                shared.config.upstream.as_ref()
            } else {
                None
            };
            let out = request::forward_head(&head, host, port, path, upstream);
            drop(head);
            entry.decision = Decision::Allow;
            match splice::send_all(&route.stream, &out).await {
                Ok(()) => {
                    entry.counters.up.set(out.len() as u64);
                    drop(out);
                    tunnel::fetch(&client, &route.stream, &entry.counters).await
                }
                Err(e) => Err(End::Io(e)),
            }
        }
    };
    match ended {
        Ok(()) => {}
        Err(End::Refused(r)) => {
            // the client already has its 200; record the refusal, keep the status it saw
            entry.refused(&r);
            entry.status = Some(200);
        }
        Err(End::Io(e)) => {
            // a reset mid-transfer is normal traffic, not a decision: keep "allow", note it
            entry.detail = Some(format!("ended with: {e}"));
        }
    }
}

/// Answers with `refusal`, then closes gently: half-close, and read what the client still sends
/// for a moment so the close does not turn into a reset that destroys the answer in flight.
async fn refuse(client: &TcpStream, mut entry: Entry<'_>, refusal: Refusal) {
    entry.refused(&refusal);
    splice::answer_then_close(client, &refusal.response(), 256 * 1024, || drop(entry)).await;
}
