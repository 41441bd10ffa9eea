//! Test fixtures: the relay in-process on 127.0.0.1, small servers, a raw HTTP client, tinyproxy.

#![allow(dead_code)]

pub mod hello;
pub mod servers;
pub use nestbox_testkit::tinyproxy;
pub mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use nestbox_net::{AuditLog, Lifecycle, Limits, RelayConfig, StaticHosts, Upstream, serve};
use nestbox_policy::{Allowlist, Origin, RuleSource};

/// A pipe: (read end, write end).
pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds is a two-int array for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Builds a relay for one test.
pub struct RelayBuilder {
    allowlist: Allowlist,
    hosts: StaticHosts,
    upstream: Option<Upstream>,
    limits: Limits,
    audit: bool,
    step_id: Option<String>,
}

impl RelayBuilder {
    pub fn allow(mut self, entry: &str) -> Self {
        self.allowlist
            .allow_text(entry, RuleSource::Entry(Origin::Flag("--allow")))
            .unwrap();
        self
    }

    pub fn deny(mut self, entry: &str) -> Self {
        self.allowlist
            .deny_text(entry, RuleSource::Entry(Origin::Flag("--deny")))
            .unwrap();
        self
    }

    /// `name=addr[,addr]`, answered without DNS.
    pub fn resolve(mut self, entry: &str) -> Self {
        self.hosts.add(entry).unwrap();
        self
    }

    pub fn upstream(mut self, url: &str) -> Self {
        self.upstream = Some(Upstream::parse(url).unwrap());
        self
    }

    pub fn limits(mut self, f: impl FnOnce(&mut Limits)) -> Self {
        f(&mut self.limits);
        self
    }

    pub fn audit(mut self) -> Self {
        self.audit = true;
        self
    }

    pub fn step(mut self, id: &str) -> Self {
        self.step_id = Some(id.into());
        self
    }

    pub fn start(self) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let audit_path = dir.path().join("audit.jsonl");
        let mut config = RelayConfig::new(self.allowlist);
        config.hosts = self.hosts;
        config.upstream = self.upstream;
        config.limits = self.limits;
        config.step_id = self.step_id;
        if self.audit {
            config.audit = Some(AuditLog::open(&audit_path).unwrap());
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (ready_r, ready_w) = pipe();
        let (stop_r, stop_w) = pipe();
        let thread = std::thread::spawn(move || {
            serve(
                listener,
                config,
                Lifecycle {
                    ready: Some(ready_w),
                    watch: vec![stop_r],
                },
            )
            .unwrap();
        });
        let mut ready = std::fs::File::from(ready_r);
        let mut byte = [0u8; 1];
        assert_eq!(
            ready.read(&mut byte).unwrap(),
            1,
            "the relay wrote its ready byte"
        );
        Relay {
            addr,
            stop: Some(stop_w),
            thread: Some(thread),
            audit_path: self.audit.then_some(audit_path),
            _dir: dir,
        }
    }
}

/// A relay serving on 127.0.0.1 in a thread of the test process.
pub struct Relay {
    pub addr: SocketAddr,
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    audit_path: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Relay {
    pub fn builder() -> RelayBuilder {
        RelayBuilder {
            allowlist: Allowlist::new(),
            hosts: StaticHosts::default(),
            upstream: None,
            limits: Limits::default(),
            audit: false,
            step_id: None,
        }
    }

    /// Opens a client connection to the relay.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        s
    }

    /// Sends `raw` as the request and reads the response head (and body, by Content-Length).
    pub fn send(&self, raw: &[u8]) -> (TcpStream, Response) {
        let mut s = self.connect();
        s.write_all(raw).unwrap();
        let r = read_response(&mut s);
        (s, r)
    }

    /// `CONNECT target` and the response.
    pub fn connect_to(&self, target: &str) -> (TcpStream, Response) {
        self.send(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
    }

    /// Stops the relay (as the step's exit would) and waits for it.
    pub fn stop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    /// The audit log's lines, parsed. Stops the relay first so every line is written.
    pub fn audit_lines(&mut self) -> Vec<serde_json::Value> {
        self.stop();
        let path = self.audit_path.as_ref().expect("relay built with .audit()");
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// Reads a response head byte by byte (so nothing after it is consumed), then a body of
/// Content-Length bytes if there is one.
pub fn read_response(s: &mut TcpStream) -> Response {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Ok(_) => panic!(
                "connection closed before a full response head: {:?}",
                String::from_utf8_lossy(&head)
            ),
            Err(e) => panic!(
                "reading response head: {e}; got {:?}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    let head = String::from_utf8(head).unwrap();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head:?}"));
    let mut r = Response {
        status,
        head,
        body: String::new(),
    };
    if let Some(len) = r.header("content-length") {
        let mut body = vec![0u8; len.parse().unwrap()];
        s.read_exact(&mut body).unwrap();
        r.body = String::from_utf8(body).unwrap();
    }
    r
}

/// Asserts a refusal: the status, `X-Nestbox-Denied`, and a JSON body naming the same reason
/// with a detail and a hint.
pub fn assert_refused(r: &Response, status: u16, reason: &str) -> serde_json::Value {
    assert_eq!(r.status, status, "status; response: {r:?}");
    assert_eq!(
        r.header("x-nestbox-denied"),
        Some(reason),
        "header; response: {r:?}"
    );
    let v = r.json();
    assert_eq!(v["error"], reason, "{v}");
    assert!(!v["detail"].as_str().unwrap_or("").is_empty(), "{v}");
    assert!(!v["allow"].as_str().unwrap_or("").is_empty(), "{v}");
    v
}

/// Asserts that `s` carries bytes both ways (an echo server is at the other end).
pub fn assert_echoes(s: &mut TcpStream) {
    let msg = b"nestbox relay test payload\n";
    s.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);
}

/// Asserts that the peer closes `s` without sending anything (more).
pub fn assert_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("expected close, got {n} bytes: {:?}", &buf[..n]),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected close, got error {e}"),
    }
}
