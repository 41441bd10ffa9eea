//! A small HTTP/1.1 server on a chosen loopback address: fixed body, or a large body sent
//! slowly (to interrupt transfers midway). Each request is answered and the connection closed;
//! a `HEAD` request gets the header fields only, as HTTP says.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server sends back.
#[derive(Clone, Debug)]
pub enum Body {
    /// This text, at once.
    Text(String),
    /// `total` bytes of `x` in `chunk`-byte pieces with `pause` between them.
    Slow {
        total: usize,
        chunk: usize,
        pause: Duration,
    },
}

/// A running server; it stops when the test process ends.
pub struct HttpServer {
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    /// Listens on `addr` (e.g. `127.0.0.2:0`).
    pub fn start(addr: &str, body: Body) -> HttpServer {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (r, h) = (requests.clone(), heads.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { return };
                let (r, h, body) = (r.clone(), h.clone(), body.clone());
                std::thread::spawn(move || serve(s, &body, &r, &h));
            }
        });
        HttpServer {
            addr,
            requests,
            heads,
        }
    }

    /// `http://addr/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Request heads received so far.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve(mut s: TcpStream, body: &Body, requests: &AtomicUsize, heads: &Mutex<Vec<String>>) {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    requests.fetch_add(1, Ordering::SeqCst);
    let is_head = head.starts_with(b"HEAD ");
    heads
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    match body {
        Body::Text(t) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                t.len(),
                if is_head { "" } else { t }
            );
        }
        Body::Slow {
            total,
            chunk,
            pause,
        } => {
            if write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
            )
            .is_err()
            {
                return;
            }
            let piece = vec![b'x'; *chunk];
            let mut sent = 0;
            while sent < *total {
                let n = (*total - sent).min(*chunk);
                if s.write_all(&piece[..n]).is_err() {
                    return;
                }
                sent += n;
                std::thread::sleep(*pause);
            }
        }
    }
}
