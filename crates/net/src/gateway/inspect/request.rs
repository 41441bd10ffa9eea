//! One inspected request, checked in order: authority, dot segments, method and path,
//! placeholders (resolved), body (buffered and scanned), then forwarded over a pooled
//! connection. Each step is a function returning the refusal that ends the request.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, Uri};
use nestbox_policy::parse_authority;
use tokio::time::Instant;

use super::record::{OutBody, RequestRecord, RequestRecordBox, refused};
use super::{Conn, Context, is_hop_by_hop};
use crate::audit::Decision;
use crate::gateway::audit::HttpRequest;
use crate::gateway::placeholder::{self, BodyScanner, Place};
use crate::gateway::pool::{self, Sender};
use crate::relay::refusal::Refusal;
use crate::relay::request::HOP_BY_HOP;

/// Handles one request of an inspected connection.
pub(super) async fn handle(req: Request<Incoming>, conn: Rc<Conn>, h2: bool) -> Response<OutBody> {
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
    let ctx = &conn.ctx;
    if let Err(r) = admit(ctx, &req, &path) {
        return refused(rec, &r);
    }
    let (parts, body) = req.into_parts();
    let rewritten = match rewrite(ctx, &parts, &path) {
        Ok(r) => r,
        Err(r) => return refused(rec, &r),
    };
    rec.credentials.clone_from(&rewritten.credentials);
    let body = match read_body(ctx, body).await {
        Ok(b) => b,
        Err(r) => return refused(rec, &r),
    };
    rec.up = body.len() as u64;

    let first = conn.first.borrow_mut().take();
    let sender = match first {
        Some(s) => s,
        None => match ctx.open().await {
            Ok(s) => s,
            Err(r) => return refused(rec, &r),
        },
    };
    let out = match upstream_request(ctx, &parts, rewritten, &sender, body) {
        Ok(out) => out,
        Err(r) => return refused(rec, &r),
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
    let (mut parts, body) = match sent {
        Ok(r) => r.into_parts(),
        Err(e) => {
            let r = Refusal::upstream_failed(&ctx.host, ctx.port, &e.to_string());
            return refused(rec, &r);
        }
    };
    strip_hop_by_hop(&mut parts.headers);
    rec.decision = Decision::Allow;
    rec.status = parts.status.as_u16();
    Response::from_parts(parts, OutBody::Stream(body, RequestRecordBox(rec)))
}

/// Steps 1 to 3: the tunnel's host and no other; no dot segments (a server would resolve them
/// after the path was checked); a method and path some admitted rule allows.
fn admit(ctx: &Context, req: &Request<Incoming>, path: &str) -> Result<(), Refusal> {
    let asked = asked_authority(req).unwrap_or_default();
    let same = match parse_authority(&asked) {
        Ok((h, p)) => h == ctx.host && p.unwrap_or(443) == ctx.port,
        Err(_) => false,
    };
    if !same {
        return Err(Refusal::host_mismatch(&ctx.host, ctx.port, &asked));
    }
    if has_dot_segment(path) {
        return Err(Refusal::path_not_canonical(path));
    }
    let method = req.method().as_str();
    let rules = &ctx.admission.rules;
    if !rules
        .iter()
        .any(|&i| ctx.generation.rule(i).admits_request(method, path))
    {
        let names: Vec<String> = rules
            .iter()
            .map(|&i| format!("`{}`", ctx.generation.rule(i).name))
            .collect();
        return Err(Refusal::request_not_allowed(
            method, &ctx.host, path, &names,
        ));
    }
    Ok(())
}

/// The request with its placeholders resolved.
struct Rewritten {
    /// Path and query, as sent on.
    target: String,
    /// End-to-end header fields, values resolved.
    headers: Vec<(HeaderName, Vec<u8>)>,
    /// The client asked for trailers (`te: trailers`, gRPC), passed on over HTTP/2.
    te_trailers: bool,
    /// The credentials used, by name.
    credentials: Vec<String>,
}

/// Step 4: every placeholder in the path, the query and the header values must name a
/// credential bound to this endpoint and caller; each is replaced by its secret.
fn rewrite(ctx: &Context, parts: &Parts, path: &str) -> Result<Rewritten, Refusal> {
    let forms = ctx.generation.forms();
    let mut used: Vec<String> = Vec::new();
    let mut refusal: Option<Refusal> = None;
    let mut resolve = |name: &str| -> Result<Vec<u8>, ()> {
        match ctx
            .generation
            .resolve(name, &ctx.caller, &ctx.host, ctx.port, path)
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
    let failed =
        |refusal: Option<Refusal>| refusal.unwrap_or_else(|| Refusal::credential_unknown("?"));

    let mut target = match placeholder::rewrite(path.as_bytes(), forms, Place::Url, &mut resolve) {
        Ok(Some(p)) => String::from_utf8_lossy(&p).into_owned(),
        Ok(None) => path.to_string(),
        Err(()) => return Err(failed(refusal)),
    };
    if let Some(query) = parts.uri.query() {
        target.push('?');
        match placeholder::rewrite(query.as_bytes(), forms, Place::Url, &mut resolve) {
            Ok(Some(q)) => target.push_str(&String::from_utf8_lossy(&q)),
            Ok(None) => target.push_str(query),
            Err(()) => return Err(failed(refusal)),
        }
    }
    let named = named_in_connection(&parts.headers);
    let mut headers = Vec::with_capacity(parts.headers.len());
    let mut te_trailers = false;
    for (name, value) in &parts.headers {
        let lower = name.as_str();
        if lower == "te" && value.as_bytes().eq_ignore_ascii_case(b"trailers") {
            te_trailers = true;
        }
        if is_hop_by_hop(lower) || named.iter().any(|n| n == lower) {
            continue;
        }
        match placeholder::rewrite_header(value.as_bytes(), forms, &mut resolve) {
            Ok(Some(v)) => headers.push((name.clone(), v)),
            Ok(None) => headers.push((name.clone(), value.as_bytes().to_vec())),
            Err(()) => return Err(failed(refusal)),
        }
    }
    Ok(Rewritten {
        target,
        headers,
        te_trailers,
        credentials: used,
    })
}

/// Step 5: the whole body, before anything is sent: at most `gateway.max_body`, and without a
/// complete placeholder (a body is never rewritten, so one would reach the server as text).
async fn read_body(ctx: &Context, mut body: Incoming) -> Result<Bytes, Refusal> {
    let limit = ctx.generation.policy.settings.max_body;
    let mut scanner = BodyScanner::new(ctx.generation.forms());
    let mut collected = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| Refusal::bad_request(format!("reading the request body failed: {e}")))?;
        if let Some(data) = frame.data_ref() {
            if collected.len() as u64 + data.len() as u64 > limit {
                return Err(Refusal::body_too_large(limit));
            }
            if scanner.push(data) {
                let name = scanner.found.clone().unwrap_or_default();
                return Err(Refusal::placeholder_in_body(&name));
            }
            collected.extend_from_slice(data);
        }
    }
    Ok(collected.freeze())
}

/// Step 6: the request as the server gets it: origin form and `Host` over HTTP/1.1, absolute
/// form (`:authority`) over HTTP/2.
fn upstream_request(
    ctx: &Context,
    parts: &Parts,
    rewritten: Rewritten,
    sender: &Sender,
    body: Bytes,
) -> Result<Request<Full<Bytes>>, Refusal> {
    let authority = if ctx.port == 443 {
        ctx.host.to_string()
    } else {
        format!("{}:{}", ctx.host, ctx.port)
    };
    let uri = match sender {
        Sender::H2(..) => format!("https://{authority}{}", rewritten.target),
        Sender::H1(..) => rewritten.target,
    };
    let uri: Uri = uri.parse().map_err(|_| {
        Refusal::bad_request("the request target cannot be rebuilt after resolution")
    })?;
    let mut out = Request::builder().method(parts.method.clone()).uri(uri);
    let Some(h) = out.headers_mut() else {
        return Err(Refusal::bad_request("the request cannot be rebuilt"));
    };
    for (name, value) in rewritten.headers {
        let value = HeaderValue::from_bytes(&value).map_err(|_| {
            Refusal::credential_value_invalid(rewritten.credentials.first().map_or("?", |s| s))
        })?;
        h.append(name, value);
    }
    match sender {
        Sender::H1(..) => {
            if let Ok(v) = HeaderValue::from_str(&authority) {
                h.insert(hyper::header::HOST, v);
            }
        }
        Sender::H2(..) if rewritten.te_trailers => {
            h.insert(hyper::header::TE, HeaderValue::from_static("trailers"));
        }
        Sender::H2(..) => {}
    }
    out.body(Full::new(body))
        .map_err(|_| Refusal::bad_request("the request cannot be rebuilt"))
}

/// The fields a `Connection` header names (hop-by-hop by declaration).
fn named_in_connection(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect()
}

/// Removes hop-by-hop fields from a response.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = named_in_connection(headers);
    let fixed = HOP_BY_HOP.iter().chain(&["expect"]).map(|s| s.to_string());
    for name in fixed.chain(named) {
        if name != "host" {
            headers.remove(name.as_str());
        }
    }
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

    #[test]
    fn hop_by_hop_fields_leave_responses() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("content-type"));
    }
}
