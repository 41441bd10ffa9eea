//! Upstream connections for inspected requests, shared by the client connections of one worker
//! thread: a thousand idle clients of one API hold a handful of verified TLS connections to it,
//! not a thousand.
//!
//! A connection is pooled under (host, port, HTTP/2 offered, policy generation): it was verified
//! for that host under that generation's trust. Requests carry their own credentials, so
//! callers may share a connection; but each caller's rules decide which addresses it may reach,
//! so a pooled connection is handed out only after its address passes the taker's check.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::{http1 as client1, http2 as client2};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::io::{HyperIo, LocalExec, TokioTimer};

/// Idle HTTP/1.1 connections kept per key.
const MAX_IDLE: usize = 16;
/// An idle connection unused this long is closed.
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(60);

/// What a pooled connection was verified for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub host: String,
    pub port: u16,
    pub http2: bool,
    pub generation: u64,
}

/// A connection ready to carry one request.
pub(crate) enum Sender {
    H1(SocketAddr, client1::SendRequest<Full<Bytes>>),
    H2(SocketAddr, client2::SendRequest<Full<Bytes>>),
}

impl Sender {
    /// The server address the connection goes to.
    pub(crate) fn addr(&self) -> SocketAddr {
        match self {
            Sender::H1(a, _) | Sender::H2(a, _) => *a,
        }
    }
}

#[derive(Default)]
struct Entry {
    h2: Option<(SocketAddr, client2::SendRequest<Full<Bytes>>)>,
    idle: Vec<(SocketAddr, client1::SendRequest<Full<Bytes>>, Instant)>,
}

thread_local! {
    static POOL: RefCell<HashMap<Key, Entry>> = RefCell::new(HashMap::new());
}

/// A pooled connection for `key` whose address `may_use` accepts.
pub(crate) fn take(key: &Key, may_use: &dyn Fn(SocketAddr) -> bool) -> Option<Sender> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let entry = p.get_mut(key)?;
        if let Some((addr, h2)) = &entry.h2 {
            if h2.is_closed() {
                entry.h2 = None;
            } else if may_use(*addr) {
                return Some(Sender::H2(*addr, h2.clone()));
            }
        }
        let now = Instant::now();
        entry
            .idle
            .retain(|(_, s, since)| !s.is_closed() && now.duration_since(*since) < IDLE_FOR);
        let i = entry
            .idle
            .iter()
            .rposition(|(addr, s, _)| s.is_ready() && may_use(*addr))?;
        let (addr, s, _) = entry.idle.remove(i);
        Some(Sender::H1(addr, s))
    })
}

/// Returns a connection after its request was sent (an HTTP/1.1 one is taken again only once
/// its response has been read).
pub(crate) fn give_back(key: &Key, sender: Sender) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let entry = p.entry(key.clone()).or_default();
        match sender {
            Sender::H2(addr, s) if !s.is_closed() => entry.h2 = Some((addr, s)),
            Sender::H1(addr, s) if !s.is_closed() && entry.idle.len() < MAX_IDLE => {
                entry.idle.push((addr, s, Instant::now()));
            }
            _ => {}
        }
    });
}

/// Drops closed and expired connections (run now and then by each worker).
pub(crate) fn sweep() {
    POOL.with(|p| {
        let now = Instant::now();
        p.borrow_mut().retain(|_, e| {
            if e.h2.as_ref().is_some_and(|(_, s)| s.is_closed()) {
                e.h2 = None;
            }
            e.idle
                .retain(|(_, s, since)| !s.is_closed() && now.duration_since(*since) < IDLE_FOR);
            e.h2.is_some() || !e.idle.is_empty()
        });
    });
}

/// Starts HTTP on a verified TLS connection: HTTP/2 when the server chose it by ALPN.
pub(crate) async fn attach(
    addr: SocketAddr,
    tls: TlsStream<TcpStream>,
) -> Result<Sender, hyper::Error> {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = HyperIo(tls);
    if h2 {
        let (sender, conn) = client2::Builder::new(LocalExec)
            .timer(TokioTimer)
            .handshake(io)
            .await?;
        tokio::task::spawn_local(conn);
        Ok(Sender::H2(addr, sender))
    } else {
        let (sender, conn) = client1::handshake(io).await?;
        tokio::task::spawn_local(conn);
        Ok(Sender::H1(addr, sender))
    }
}
