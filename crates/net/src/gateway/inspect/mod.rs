//! Inspected connections: the gateway verifies the server (TLS with the system roots plus the
//! policy's extras) before it answers the `CONNECT`, then terminates the client's TLS with a
//! leaf from its own CA (HTTP/2 or HTTP/1.1 by ALPN) and handles each request:
//!
//! 1. the request's authority must be the tunnel's host (421 `host_mismatch`);
//! 2. the path may not hold `.` or `..` segments (400 `path_not_canonical`);
//! 3. some admitted rule must allow the method and path (403 `request_not_allowed`);
//! 4. every placeholder in the path, query and header values must name a credential bound to
//!    this endpoint and this caller (403 `credential_*`), and is replaced by its secret;
//! 5. the body is buffered up to `gateway.max_body` (413 beyond) and refused if it holds a
//!    complete placeholder (403 `placeholder_in_body`), all before anything goes upstream;
//! 6. the request goes to the server over a pooled connection; the response streams back.

mod record;
mod request;

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use nestbox_policy::Host;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::{TlsAcceptor, TlsConnector, client::TlsStream};

use super::Shared;
use super::conn::ConnRecord;
use super::generation::{Admission, Generation};
use super::identity::CallerId;
use super::io::{HyperIo, LocalExec, Prefixed, TokioTimer};
use super::pool::{self, Key, Sender};
use crate::audit::Decision;
use crate::relay::refusal::Refusal;
use crate::relay::request::HOP_BY_HOP;

/// Whether a field is never forwarded, in either direction: the relay's hop-by-hop set, and
/// `Expect` (the whole body is in hand before the request goes on: nothing to wait for).
pub(super) fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name) || name == "expect"
}

/// Everything a request handler needs about its connection.
pub(crate) struct Context {
    pub shared: Arc<Shared>,
    pub generation: Arc<Generation>,
    pub caller: CallerId,
    pub host: Host,
    pub port: u16,
    pub admission: Admission,
    pub peer: SocketAddr,
}

/// One client connection's state while it is served.
struct Conn {
    ctx: Context,
    /// The upstream connection opened (or taken from the pool) when the `CONNECT` came.
    first: RefCell<Option<Sender>>,
    up: Cell<u64>,
    down: Cell<u64>,
}

/// Opens TLS to the server over `tcp` and verifies it.
async fn connect_upstream(ctx: &Context, tcp: TcpStream) -> Result<TlsStream<TcpStream>, Refusal> {
    let config = if ctx.admission.http2 {
        ctx.generation.client_h2.clone()
    } else {
        ctx.generation.client_h1.clone()
    };
    let name = server_name(&ctx.host)
        .map_err(|why| Refusal::upstream_tls_failed(&ctx.host, ctx.port, &why))?;
    let limit = ctx.shared.limits.connect_timeout;
    match timeout(limit, TlsConnector::from(config).connect(name, tcp)).await {
        Err(_) => Err(Refusal::connect_timeout(&ctx.host, ctx.port, limit)),
        Ok(Err(e)) => Err(Refusal::upstream_tls_failed(
            &ctx.host,
            ctx.port,
            &e.to_string(),
        )),
        Ok(Ok(tls)) => Ok(tls),
    }
}

impl Context {
    pub(super) fn pool_key(&self) -> Key {
        Key {
            host: self.host.to_string(),
            port: self.port,
            http2: self.admission.http2,
            generation: self.generation.number,
        }
    }

    /// A verified connection to the server: a pooled one whose address this caller's rules
    /// allow, or a new one (resolved, checked, dialed, TLS verified). Called before the
    /// `CONNECT` is answered, so a server that cannot be trusted is a clear 502 rather than a
    /// broken tunnel.
    pub(crate) async fn open(&self) -> Result<Sender, Refusal> {
        let may_use = |addr: SocketAddr| {
            self.generation
                .check_addr(&self.admission, &self.host, self.port, addr.ip())
                .is_ok()
        };
        if let Some(s) = pool::take(&self.pool_key(), &may_use) {
            return Ok(s);
        }
        let (tcp, _) = super::conn::dial(
            &self.shared,
            &self.generation,
            &self.admission,
            &self.host,
            self.port,
        )
        .await?;
        let addr = tcp
            .peer_addr()
            .map_err(|e| Refusal::upstream_failed(&self.host, self.port, &e.to_string()))?;
        let tls = connect_upstream(self, tcp).await?;
        pool::attach(addr, tls)
            .await
            .map_err(|e| Refusal::upstream_failed(&self.host, self.port, &e.to_string()))
    }
}

fn server_name(host: &Host) -> Result<ServerName<'static>, String> {
    match host {
        Host::Name(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string()),
        Host::Addr(a) => Ok(ServerName::IpAddress((*a).into())),
    }
}

/// Serves an inspected connection after the upstream was verified: answers the `CONNECT`,
/// terminates TLS, and handles requests until either side closes.
pub(crate) async fn run(
    client: TcpStream,
    early: Vec<u8>,
    upstream: Sender,
    ctx: Context,
    rec: &mut ConnRecord,
) {
    let shared = ctx.shared.clone();
    let config = match shared.ca.server_config(&ctx.host, ctx.admission.http2) {
        Ok(c) => c,
        Err(e) => {
            rec.decision = Decision::Error;
            rec.reason = Some("leaf_failed");
            rec.detail = Some(e);
            return;
        }
    };
    if !rec.open_tunnel(&client).await {
        return;
    }
    let accepted = timeout(
        shared.limits.head_timeout,
        TlsAcceptor::from(config).accept(Prefixed::new(early, client)),
    )
    .await;
    let tls = match accepted {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            rec.reason = Some("client_tls_failed");
            rec.detail = Some(format!(
                "the client's TLS handshake failed: {e} (does it trust the gateway CA? \
                 `nestbox gateway ca` prints it)"
            ));
            return;
        }
        Err(_) => {
            rec.reason = Some("client_tls_timeout");
            return;
        }
    };
    let (_, session) = tls.get_ref();
    if let Some(sni) = session.server_name()
        && Host::parse(sni).ok().as_ref() != Some(&ctx.host)
    {
        let r = Refusal::sni_mismatch(&ctx.host, sni);
        rec.decision = r.decision;
        rec.reason = Some(r.reason);
        rec.detail = Some(r.detail);
        return;
    }
    let h2 = session.alpn_protocol() == Some(b"h2");
    let conn = Rc::new(Conn {
        ctx,
        first: RefCell::new(Some(upstream)),
        up: Cell::new(0),
        down: Cell::new(0),
    });
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req| {
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(request::handle(req, conn, h2).await) }
        })
    };
    let io = HyperIo(tls);
    let served = if h2 {
        hyper::server::conn::http2::Builder::new(LocalExec)
            .timer(TokioTimer)
            .serve_connection(io, service)
            .await
    } else {
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer)
            .header_read_timeout(
                shared
                    .limits
                    .head_timeout
                    .max(std::time::Duration::from_secs(30)),
            )
            .serve_connection(io, service)
            .await
    };
    if let Err(e) = served {
        rec.detail = Some(format!("ended with: {e}"));
    }
    rec.counters.up.set(conn.up.get());
    rec.counters.down.set(conn.down.get());
}
