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

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, Uri};
use nestbox_policy::{Host, parse_authority};
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tokio_rustls::{TlsAcceptor, TlsConnector, client::TlsStream};

use super::Shared;
use super::audit::{Endpoint, GatewayRecord, HttpRequest, Traffic};
use super::conn::ConnRecord;
use super::generation::{Admission, Generation};
use super::identity::CallerId;
use super::io::{HyperIo, LocalExec, Prefixed, TokioTimer};
use super::placeholder::{self, BodyScanner, Place};
use super::pool::{self, Key, Sender};
use crate::audit::{Decision, rfc3339};
use crate::relay::refusal::Refusal;
use crate::relay::splice;

/// Hop-by-hop fields: never forwarded in either direction.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    // the whole body is in hand before the request goes on: nothing to wait for
    "expect",
];

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
    fn pool_key(&self) -> Key {
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
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if let Err(e) = splice::send_all(&client, established).await {
        rec.reason = Some("client_error");
        rec.detail = Some(e.to_string());
        return;
    }
    rec.decision = Decision::Allow;
    rec.status = Some(200);
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
            async move { Ok::<_, Infallible>(handle(req, conn, h2).await) }
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

/// The audit line of one request, written when its response ends (or is dropped).
struct RequestRecord {
    conn: Rc<Conn>,
    started: Instant,
    request: HttpRequest,
    decision: Decision,
    reason: Option<&'static str>,
    detail: Option<String>,
    status: u16,
    credentials: Vec<String>,
    up: u64,
    down: u64,
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        let ctx = &self.conn.ctx;
        self.conn.up.set(self.conn.up.get() + self.up);
        self.conn.down.set(self.conn.down.get() + self.down);
        let record = GatewayRecord {
            time: rfc3339(SystemTime::now()),
            class: "http",
            class_uid: 4002,
            actor: ctx.caller.audit(),
            src_endpoint: ctx.peer.to_string(),
            dst_endpoint: Endpoint {
                host: ctx.host.to_string(),
                port: ctx.port,
                ip: None,
            },
            disposition: self.decision,
            reason: self.reason,
            status_detail: self.detail.take(),
            firewall_rule: ctx
                .admission
                .rules
                .iter()
                .map(|&i| ctx.generation.rule(i).name.clone())
                .collect(),
            tls: Some("inspect"),
            http_request: Some(std::mem::take(&mut self.request)),
            status: Some(self.status),
            credentials: std::mem::take(&mut self.credentials),
            traffic: Traffic {
                bytes_out: self.up,
                bytes_in: self.down,
            },
            duration_ms: self.started.elapsed().as_millis() as u64,
            generation: Some(ctx.generation.number),
        };
        ctx.shared.audit(&record);
    }
}

/// A response body: a refusal's, or the server's streamed through with its bytes counted.
pub(crate) enum OutBody {
    Full {
        bytes: Option<Bytes>,
        _record: Option<RequestRecordBox>,
    },
    Stream(Incoming, RequestRecordBox),
}

/// The request's audit line, travelling with the response body.
pub(crate) struct RequestRecordBox(Box<RequestRecord>);

impl Body for OutBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            OutBody::Full { bytes, .. } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            OutBody::Stream(inner, rec) => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(d) = frame.data_ref() {
                        rec.0.down += d.len() as u64;
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                other => other,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OutBody::Full { bytes, .. } => bytes.is_none(),
            OutBody::Stream(inner, _) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OutBody::Full { bytes: Some(b), .. } => SizeHint::with_exact(b.len() as u64),
            OutBody::Full { bytes: None, .. } => SizeHint::with_exact(0),
            OutBody::Stream(inner, _) => inner.size_hint(),
        }
    }
}

fn refused(mut rec: Box<RequestRecord>, r: &Refusal) -> Response<OutBody> {
    let resp = r.http_response();
    rec.decision = r.decision;
    rec.reason = Some(r.reason);
    rec.detail = Some(r.detail.clone());
    rec.status = r.status;
    let (parts, body) = resp.into_parts();
    rec.down = body.len() as u64;
    Response::from_parts(
        parts,
        OutBody::Full {
            bytes: Some(body),
            _record: Some(RequestRecordBox(rec)),
        },
    )
}

/// Whether a path has a `.` or `..` segment, plain or percent-encoded.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| {
        let s = seg.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    })
}

/// The authority a request names: `:authority` (HTTP/2, absolute-form) or `Host`.
fn asked_authority(req: &Request<Incoming>) -> Option<String> {
    if let Some(a) = req.uri().authority() {
        return Some(a.as_str().to_string());
    }
    req.headers()
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn handle(req: Request<Incoming>, conn: Rc<Conn>, h2: bool) -> Response<OutBody> {
    let ctx = &conn.ctx;
    let path = req.uri().path().to_string();
    let mut rec = Box::new(RequestRecord {
        conn: conn.clone(),
        started: Instant::now(),
        request: HttpRequest {
            http_method: req.method().as_str().to_string(),
            path: path.clone(),
            version: if h2 { "HTTP/2" } else { "HTTP/1.1" }.to_string(),
        },
        decision: Decision::Deny,
        reason: None,
        detail: None,
        status: 0,
        credentials: Vec::new(),
        up: 0,
        down: 0,
    });

    // 1. the tunnel's host, and no other
    let asked = asked_authority(&req).unwrap_or_default();
    let same = match parse_authority(&asked) {
        Ok((h, p)) => h == ctx.host && p.unwrap_or(443) == ctx.port,
        Err(_) => false,
    };
    if !same {
        return refused(rec, &Refusal::host_mismatch(&ctx.host, ctx.port, &asked));
    }
    // 2. no dot segments: a server would resolve them after the path was checked
    if has_dot_segment(&path) {
        return refused(rec, &Refusal::path_not_canonical(&path));
    }
    // 3. method and path
    let method = req.method().as_str().to_string();
    let admits = ctx
        .admission
        .rules
        .iter()
        .any(|&i| ctx.generation.rule(i).admits_request(&method, &path));
    if !admits {
        let names: Vec<String> = ctx
            .admission
            .rules
            .iter()
            .map(|&i| format!("`{}`", ctx.generation.rule(i).name))
            .collect();
        return refused(
            rec,
            &Refusal::request_not_allowed(&method, &ctx.host, &path, &names),
        );
    }

    // 4. placeholders in the path, the query and header values
    let forms = ctx.generation.forms();
    let mut used: Vec<String> = Vec::new();
    let mut refusal: Option<Refusal> = None;
    let mut resolve = |name: &str| -> Result<Vec<u8>, ()> {
        match ctx
            .generation
            .resolve(name, &ctx.caller, &ctx.host, ctx.port, &path)
        {
            Ok(secret) => {
                if !used.iter().any(|u| u == name) {
                    used.push(name.to_string());
                }
                Ok(secret.expose().to_vec())
            }
            Err(r) => {
                refusal.get_or_insert(r);
                Err(())
            }
        }
    };
    let (parts, body) = req.into_parts();
    let new_path = placeholder::rewrite(path.as_bytes(), forms, Place::Url, &mut resolve);
    let query = parts.uri.query().unwrap_or("").to_string();
    let new_query = placeholder::rewrite(query.as_bytes(), forms, Place::Url, &mut resolve);
    let mut headers: Vec<(HeaderName, Vec<u8>)> = Vec::with_capacity(parts.headers.len());
    let mut failed = new_path.is_err() || new_query.is_err();
    let named_in_connection: Vec<String> = parts
        .headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    let mut keep_te_trailers = false;
    for (name, value) in &parts.headers {
        let lower = name.as_str();
        if lower == "te" && value.as_bytes().eq_ignore_ascii_case(b"trailers") {
            keep_te_trailers = true;
        }
        if HOP_BY_HOP.contains(&lower) || named_in_connection.iter().any(|n| n == lower) {
            continue;
        }
        if failed {
            break;
        }
        match placeholder::rewrite_header(value.as_bytes(), forms, &mut resolve) {
            Ok(Some(v)) => headers.push((name.clone(), v)),
            Ok(None) => headers.push((name.clone(), value.as_bytes().to_vec())),
            Err(()) => failed = true,
        }
    }
    if failed {
        let r = refusal.unwrap_or_else(|| Refusal::credential_unknown("?"));
        return refused(rec, &r);
    }
    rec.credentials = used;

    // 5. the body, whole, before anything is sent
    let limit = ctx.generation.policy.settings.max_body;
    let mut scanner = BodyScanner::new(forms);
    let mut collected = BytesMut::new();
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                rec.decision = Decision::Error;
                rec.reason = Some("client_error");
                rec.detail = Some(e.to_string());
                rec.status = 400;
                let r = Refusal::bad_request(format!("reading the request body failed: {e}"));
                return refused(rec, &r);
            }
        };
        if let Some(data) = frame.data_ref() {
            if collected.len() as u64 + data.len() as u64 > limit {
                return refused(rec, &Refusal::body_too_large(limit));
            }
            if scanner.push(data) {
                let name = scanner.found.clone().unwrap_or_default();
                return refused(rec, &Refusal::placeholder_in_body(&name));
            }
            collected.extend_from_slice(data);
        }
    }
    let body = collected.freeze();
    rec.up = body.len() as u64;

    // 6. build the request for the server
    let mut target = match new_path {
        Ok(Some(p)) => String::from_utf8_lossy(&p).into_owned(),
        _ => path.clone(),
    };
    match new_query {
        Ok(Some(q)) => {
            target.push('?');
            target.push_str(&String::from_utf8_lossy(&q));
        }
        _ if !query.is_empty() => {
            target.push('?');
            target.push_str(&query);
        }
        _ => {}
    }
    let authority = if ctx.port == 443 {
        ctx.host.to_string()
    } else {
        format!("{}:{}", ctx.host, ctx.port)
    };
    let first = conn.first.borrow_mut().take();
    let sender = match first {
        Some(s) => s,
        None => match ctx.open().await {
            Ok(s) => s,
            Err(r) => return refused(rec, &r),
        },
    };
    let uri = match &sender {
        Sender::H2(..) => format!("https://{authority}{target}"),
        Sender::H1(..) => target,
    };
    let Ok(uri) = uri.parse::<Uri>() else {
        let r = Refusal::bad_request("the request target cannot be rebuilt after resolution");
        return refused(rec, &r);
    };
    let mut out = Request::builder().method(parts.method.clone()).uri(uri);
    let Some(h) = out.headers_mut() else {
        let r = Refusal::bad_request("the request cannot be rebuilt");
        return refused(rec, &r);
    };
    for (name, value) in headers {
        match HeaderValue::from_bytes(&value) {
            Ok(v) => {
                h.append(name, v);
            }
            Err(_) => {
                let r =
                    Refusal::credential_value_invalid(rec.credentials.first().map_or("?", |s| s));
                return refused(rec, &r);
            }
        }
    }
    if let Sender::H1(..) = sender
        && let Ok(v) = HeaderValue::from_str(&authority)
    {
        h.insert(hyper::header::HOST, v);
    }
    if keep_te_trailers && matches!(sender, Sender::H2(..)) {
        h.insert(hyper::header::TE, HeaderValue::from_static("trailers"));
    }
    let Ok(out) = out.body(Full::new(body)) else {
        let r = Refusal::bad_request("the request cannot be rebuilt");
        return refused(rec, &r);
    };
    let key = ctx.pool_key();
    let sent = match sender {
        Sender::H2(addr, mut s) => {
            let r = s.send_request(out).await;
            pool::give_back(&key, Sender::H2(addr, s));
            r
        }
        Sender::H1(addr, mut s) => {
            let r = s.send_request(out).await;
            // taken again only once this response has been read
            pool::give_back(&key, Sender::H1(addr, s));
            r
        }
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            return refused(
                rec,
                &Refusal::upstream_failed(&ctx.host, ctx.port, &e.to_string()),
            );
        }
    };
    let (mut parts, body) = resp.into_parts();
    let named: Vec<String> = parts
        .headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for name in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(named) {
        if name != "host" {
            parts.headers.remove(name.as_str());
        }
    }
    rec.decision = Decision::Allow;
    rec.status = parts.status.as_u16();
    Response::from_parts(parts, OutBody::Stream(body, RequestRecordBox(rec)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_seen_in_every_spelling() {
        assert!(has_dot_segment("/v1/../admin"));
        assert!(has_dot_segment("/v1/%2E%2e/admin"));
        assert!(has_dot_segment("/./x"));
        assert!(!has_dot_segment("/v1/messages"));
        assert!(!has_dot_segment("/v1/.well-known/x"));
    }
}
