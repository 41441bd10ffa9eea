//! The audit line of one inspected request, and the response body that carries it: written
//! when the response ends, with the bytes it moved.

use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use hyper::Response;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Instant;

use super::Conn;
use crate::audit::{Decision, rfc3339};
use crate::gateway::audit::{Endpoint, GatewayRecord, HttpRequest, Traffic};
use crate::relay::refusal::Refusal;

/// The audit line of one request, written when its response ends (or is dropped).
pub(super) struct RequestRecord {
    pub conn: Rc<Conn>,
    pub started: Instant,
    pub request: HttpRequest,
    pub decision: Decision,
    pub reason: Option<&'static str>,
    pub detail: Option<String>,
    pub status: u16,
    pub credentials: Vec<String>,
    pub up: u64,
    pub down: u64,
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
pub(crate) struct RequestRecordBox(pub(super) Box<RequestRecord>);

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

/// The refusal `r` as the response, recorded.
pub(super) fn refused(mut rec: Box<RequestRecord>, r: &Refusal) -> Response<OutBody> {
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
