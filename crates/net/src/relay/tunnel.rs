//! The two shapes of traffic after a request is allowed: a `CONNECT` tunnel (both directions,
//! the client's first bytes checked for a mismatched TLS server name) and a plain-HTTP fetch
//! (one request up, one response down, then close).

use std::cell::Cell;
use std::io;
use std::pin::pin;
use std::time::Duration;

use nestbox_policy::Host;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::refusal::Refusal;
use super::sni::{self, Hello};
use super::splice::{pump, send_all};

/// How a tunnel ended badly.
#[derive(Debug)]
pub(crate) enum End {
    /// The client's first bytes were refused (SNI mismatch, malformed ClientHello).
    Refused(Refusal),
    Io(io::Error),
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> End {
        End::Io(e)
    }
}

/// Byte counters of one connection, updated while bytes flow.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub up: Cell<u64>,
    pub down: Cell<u64>,
}

/// Runs a `CONNECT` tunnel between `client` and `server` until both directions end.
///
/// `early` holds bytes the client sent right after its request head; `server_early` bytes the
/// upstream proxy sent after its `200`. The server-to-client direction starts at once (some
/// protocols speak server-first); the client-to-server direction starts only after the client's
/// first bytes passed the SNI check, which waits as long as the client stays silent but gives a
/// started ClientHello `hello_time` to complete.
pub(crate) async fn connect(
    client: &TcpStream,
    server: &TcpStream,
    host: &Host,
    early: Vec<u8>,
    server_early: Vec<u8>,
    counters: &Counters,
    hello_time: Duration,
) -> Result<(), End> {
    if !server_early.is_empty() {
        send_all(client, &server_early).await?;
        counters.down.set(server_early.len() as u64);
    }
    drop(server_early);
    let upward = async {
        let first = check_first_bytes(client, host, early, hello_time).await?;
        if !first.is_empty() {
            send_all(server, &first).await?;
            counters.up.set(counters.up.get() + first.len() as u64);
        }
        drop(first);
        pump(client, server, &counters.up).await?;
        Ok::<(), End>(())
    };
    let downward = async {
        pump(server, client, &counters.down).await?;
        Ok::<(), End>(())
    };
    both(upward, downward).await
}

/// Runs two directions until both finish; the first error ends both.
async fn both<A, B>(a: A, b: B) -> Result<(), End>
where
    A: Future<Output = Result<(), End>>,
    B: Future<Output = Result<(), End>>,
{
    let mut a = pin!(a);
    let mut b = pin!(b);
    let (mut a_done, mut b_done) = (false, false);
    while !(a_done && b_done) {
        tokio::select! {
            r = &mut a, if !a_done => { r?; a_done = true; }
            r = &mut b, if !b_done => { r?; b_done = true; }
        }
    }
    Ok(())
}

/// Reads the client's first bytes until they are known not to be TLS, or a complete ClientHello
/// whose server name matches `host`. Returns the bytes read, to be sent on.
async fn check_first_bytes(
    client: &TcpStream,
    host: &Host,
    mut buf: Vec<u8>,
    hello_time: Duration,
) -> Result<Vec<u8>, End> {
    let mut deadline = None;
    loop {
        match sni::inspect(&buf) {
            Hello::NotTls | Hello::ClientHello { server_name: None } => return Ok(buf),
            Hello::ClientHello {
                server_name: Some(name),
            } => {
                if name == *host {
                    return Ok(buf);
                }
                return Err(End::Refused(Refusal::sni_mismatch(host, &name.to_string())));
            }
            Hello::Malformed(why) => return Err(End::Refused(Refusal::tls_unreadable(host, why))),
            Hello::NeedMore => {}
        }
        // No deadline while nothing arrived: an idle tunnel may stay idle, holding no buffer.
        match deadline {
            None if buf.is_empty() => client.readable().await?,
            None => {
                let at = Instant::now() + hello_time;
                deadline = Some(at);
                wait_readable(client, at, host).await?;
            }
            Some(at) => wait_readable(client, at, host).await?,
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        match client.try_read_buf(&mut buf) {
            Ok(0) if buf.is_empty() => return Ok(buf),
            Ok(0) => {
                return Err(End::Refused(Refusal::tls_unreadable(
                    host,
                    "the client closed the tunnel in the middle of its ClientHello",
                )));
            }
            Ok(_) => {
                if deadline.is_none() {
                    deadline = Some(Instant::now() + hello_time);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
}

async fn wait_readable(client: &TcpStream, at: Instant, host: &Host) -> Result<(), End> {
    match timeout_at(at, client.readable()).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(End::Refused(Refusal::tls_unreadable(
            host,
            "the ClientHello did not complete in time",
        ))),
    }
}

/// Runs a plain-HTTP fetch after the request head went out: the response flows to the client
/// until the server closes; anything more the client sends is read and dropped (it was meant
/// for another request, which this connection will not carry).
pub(crate) async fn fetch(
    client: &TcpStream,
    server: &TcpStream,
    counters: &Counters,
) -> Result<(), End> {
    let downward = pin!(pump(server, client, &counters.down));
    let mut discard = pin!(discard(client));
    let mut downward = downward;
    let mut client_done = false;
    loop {
        tokio::select! {
            r = &mut downward => return Ok(r?),
            r = &mut discard, if !client_done => { r?; client_done = true; }
        }
    }
}

/// Reads and drops what `stream` sends until end of stream.
async fn discard(stream: &TcpStream) -> io::Result<()> {
    loop {
        stream.readable().await?;
        let mut scratch = [0u8; 512];
        match stream.try_read(&mut scratch) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}
