//! One inspected request, checked in order: authority, dot segments, method and path,
//! placeholders (resolved), body (buffered and scanned), then forwarded over a pooled
//! connection.

use std::rc::Rc;

use bytes::BytesMut;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, Uri};
use nestbox_policy::parse_authority;
use tokio::time::Instant;

use super::record::{OutBody, RequestRecord, RequestRecordBox, refused};
use super::{Conn, HOP_BY_HOP};
use crate::audit::Decision;
use crate::gateway::audit::HttpRequest;
use crate::gateway::placeholder::{self, BodyScanner, Place};
use crate::gateway::pool::{self, Sender};
use crate::relay::refusal::Refusal;

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

/// Handles one request of an inspected connection.
pub(super) async fn handle(req: Request<Incoming>, conn: Rc<Conn>, h2: bool) -> Response<OutBody> {
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
