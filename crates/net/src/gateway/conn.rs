//! One client connection: read the `CONNECT`, tell who is calling, decide, dial, then tunnel
//! (passthrough) or terminate TLS and inspect (see [`super::inspect`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::SystemTime;

use nestbox_policy::Host;
use nestbox_policy::gateway::TlsMode;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};

use super::Shared;
use super::audit::{Endpoint, GatewayRecord, Traffic};
use super::cells::token_from_header;
use super::generation::{Admission, Generation};
use super::identity::{CallerId, IdentityError, program_of};
use super::inspect;
use crate::audit::{Decision, rfc3339};
use crate::relay::head::{self, HeadError, HeadLimits};
use crate::relay::refusal::Refusal;
use crate::relay::request::{self, Request};
use crate::relay::splice;
use crate::relay::tunnel::{self, Counters, End};

/// What is known about one connection; written to the audit log when dropped.
pub(crate) struct ConnRecord {
    shared: Arc<Shared>,
    started: Instant,
    pub silent: bool,
    pub peer: SocketAddr,
    pub caller: Option<CallerId>,
    pub host: Option<String>,
    pub port: u16,
    pub ip: Option<String>,
    pub decision: Decision,
    pub reason: Option<&'static str>,
    pub detail: Option<String>,
    pub rules: Vec<String>,
    pub tls: Option<&'static str>,
    pub status: Option<u16>,
    pub counters: Counters,
    pub generation: Option<u64>,
}

impl ConnRecord {
    /// Tells the client its tunnel is open and records the connection as allowed; false (and
    /// the client's error recorded) when the client is already gone.
    pub(super) async fn open_tunnel(&mut self, client: &TcpStream) -> bool {
        if let Err(e) = splice::send_established(client).await {
            self.reason = Some("client_error");
            self.detail = Some(e.to_string());
            return false;
        }
        self.decision = Decision::Allow;
        self.status = Some(200);
        true
    }

    fn refused(&mut self, r: &Refusal) {
        self.decision = r.decision;
        self.reason = Some(r.reason);
        self.detail = Some(r.detail.clone());
        self.status = Some(r.status);
    }
}

impl Drop for ConnRecord {
    fn drop(&mut self) {
        if self.silent {
            return;
        }
        self.shared.stats.closed();
        let record = GatewayRecord {
            time: rfc3339(SystemTime::now()),
            class: "network",
            class_uid: 4001,
            actor: self
                .caller
                .as_ref()
                .map(CallerId::audit)
                .unwrap_or_default(),
            src_endpoint: self.peer.to_string(),
            dst_endpoint: Endpoint {
                host: self.host.take().unwrap_or_default(),
                port: self.port,
                ip: self.ip.take(),
            },
            disposition: self.decision,
            reason: self.reason,
            status_detail: self.detail.take(),
            firewall_rule: std::mem::take(&mut self.rules),
            tls: self.tls,
            http_request: None,
            status: self.status,
            credentials: Vec::new(),
            traffic: Traffic {
                bytes_out: self.counters.up.get(),
                bytes_in: self.counters.down.get(),
            },
            duration_ms: self.started.elapsed().as_millis() as u64,
            generation: self.generation,
        };
        self.shared.audit(&record);
    }
}

/// Serves one connection from accept to close.
pub(crate) async fn handle(client: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let generation = shared.current();
    shared.stats.opened();
    let mut rec = ConnRecord {
        shared: shared.clone(),
        started: Instant::now(),
        silent: false,
        peer,
        caller: None,
        host: None,
        port: 0,
        ip: None,
        decision: Decision::Deny,
        reason: None,
        detail: None,
        rules: Vec::new(),
        tls: None,
        status: None,
        counters: Counters::default(),
        generation: Some(generation.number),
    };
    let limits = shared.limits;
    let head_limits = HeadLimits {
        max_line: limits.max_request_line,
        max_head: limits.max_head,
    };
    let (head, early) = match timeout(limits.head_timeout, head::read(&client, head_limits)).await {
        Ok(Ok(found)) => found,
        Err(_) => return refuse(&client, rec, Refusal::header_timeout(limits.head_timeout)).await,
        Ok(Err(HeadError::Refuse(r))) => return refuse(&client, rec, r).await,
        Ok(Err(HeadError::Empty)) => {
            rec.silent = true;
            shared.stats.closed();
            return;
        }
        Ok(Err(HeadError::Truncated)) => {
            rec.reason = Some("truncated_request");
            return;
        }
        Ok(Err(HeadError::Io(e))) => {
            rec.reason = Some("client_error");
            rec.detail = Some(e.to_string());
            return;
        }
    };
    let (host, port) = match request::interpret(&head) {
        Ok(Request::Connect { host, port }) => (host, port),
        Ok(Request::Http { host, port, .. }) => {
            rec.host = Some(host.to_string());
            rec.port = port;
            return refuse(&client, rec, Refusal::plain_http_not_supported()).await;
        }
        Err(r) => {
            rec.host = Some(head.target.chars().take(256).collect());
            return refuse(&client, rec, r).await;
        }
    };
    rec.host = Some(host.to_string());
    rec.port = port;

    // Who: a cell token, or the program owning the client socket.
    let caller = match head.header("proxy-authorization") {
        Some(value) => match token_from_header(value).and_then(|t| shared.cells.caller(&t)) {
            Some(c) => c,
            None => return refuse(&client, rec, Refusal::cell_token_invalid()).await,
        },
        None => {
            let local = client.local_addr();
            let found = match local {
                Ok(local) => tokio::task::spawn_blocking(move || program_of(peer, local))
                    .await
                    .unwrap_or_else(|e| Err(IdentityError::Unknown(e.to_string()))),
                Err(e) => Err(IdentityError::Unknown(e.to_string())),
            };
            match found {
                Ok(c) => c,
                Err(IdentityError::Ambiguous(owners)) => {
                    rec.caller = Some(CallerId::Unknown {
                        why: "ambiguous".into(),
                    });
                    return refuse(&client, rec, Refusal::caller_ambiguous(&owners)).await;
                }
                Err(IdentityError::Unknown(why)) => CallerId::Unknown { why },
            }
        }
    };
    drop(head);
    rec.caller = Some(caller.clone());

    let admission = match generation.admit(&caller, &host, port) {
        Ok(a) => a,
        Err(r) => return refuse(&client, rec, r).await,
    };
    rec.rules = admission
        .rules
        .iter()
        .map(|&i| generation.rule(i).name.clone())
        .collect();
    rec.tls = Some(admission.tls.as_str());

    match admission.tls {
        TlsMode::Passthrough => {
            let (server, _) = match dial(&shared, &generation, &admission, &host, port).await {
                Ok(found) => found,
                Err(r) => return refuse(&client, rec, r).await,
            };
            rec.ip = server.peer_addr().ok().map(|a| a.to_string());
            if !rec.open_tunnel(&client).await {
                return;
            }
            let ended = tunnel::connect(
                &client,
                &server,
                &host,
                early,
                Vec::new(),
                &rec.counters,
                limits.head_timeout,
            )
            .await;
            match ended {
                Ok(()) => {}
                Err(End::Refused(r)) => {
                    rec.refused(&r);
                    rec.status = Some(200);
                }
                Err(End::Io(e)) => rec.detail = Some(format!("ended with: {e}")),
            }
        }
        TlsMode::Inspect => {
            let ctx = inspect::Context {
                shared: shared.clone(),
                generation: generation.clone(),
                caller,
                host,
                port,
                admission,
                peer,
            };
            // Boxed: an inspected connection's state is large, and a tunnel should not carry it.
            let upstream = match Box::pin(ctx.open()).await {
                Ok(u) => u,
                Err(r) => return refuse(&client, rec, r).await,
            };
            rec.ip = Some(upstream.addr().to_string());
            Box::pin(inspect::run(client, early, upstream, ctx, &mut rec)).await;
        }
    }
}

/// Resolves `host` (static entries first), checks every address against the admitted rules,
/// and connects to the checked addresses in order.
pub(crate) async fn dial(
    shared: &Shared,
    generation: &Generation,
    admission: &Admission,
    host: &Host,
    port: u16,
) -> Result<(TcpStream, Vec<SocketAddr>), Refusal> {
    let limit = shared.limits.connect_timeout;
    let deadline = Instant::now() + limit;
    let addrs: Vec<IpAddr> = match host {
        Host::Addr(a) => vec![a.to_canonical()],
        Host::Name(name) => match shared.hosts.get(name) {
            Some(list) => list.iter().map(|a| a.to_canonical()).collect(),
            None => {
                match timeout_at(deadline, tokio::net::lookup_host((name.as_str(), port))).await {
                    Err(_) => return Err(Refusal::connect_timeout(host, port, limit)),
                    Ok(Err(e)) => return Err(Refusal::dns_failed(host, &e.to_string())),
                    Ok(Ok(found)) => {
                        let mut out: Vec<IpAddr> = Vec::new();
                        for sa in found {
                            let ip = sa.ip().to_canonical();
                            if !out.contains(&ip) {
                                out.push(ip);
                            }
                        }
                        out
                    }
                }
            }
        },
    };
    if addrs.is_empty() {
        return Err(Refusal::dns_failed(host, "no addresses"));
    }
    for a in &addrs {
        generation.check_addr(admission, host, port, *a)?;
    }
    let targets: Vec<SocketAddr> = addrs.iter().map(|a| SocketAddr::new(*a, port)).collect();
    let mut last: Option<io::Error> = None;
    for t in &targets {
        match timeout_at(deadline, TcpStream::connect(t)).await {
            Err(_) => return Err(Refusal::connect_timeout(host, port, limit)),
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, targets));
            }
            Ok(Err(e)) => last = Some(e),
        }
    }
    let why = last.map_or_else(|| "no address".into(), |e| e.to_string());
    Err(Refusal::connect_failed(host, port, &targets, &why))
}

/// Answers with `refusal` and closes gently (as the relay does).
pub(crate) async fn refuse(client: &TcpStream, mut rec: ConnRecord, refusal: Refusal) {
    rec.refused(&refusal);
    splice::answer_then_close(client, &refusal.response(), 64 * 1024, || drop(rec)).await;
}
