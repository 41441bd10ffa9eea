//! A TLS server on 127.0.0.1 standing in for an API (`api.anthropic.com` and friends): its own
//! throw-away test CA, a certificate for the names it is given, HTTP/1.1 with keep-alive. It
//! records every request (method, path, headers, body) and answers `200 {"ok":true}`, never
//! echoing what it received, so a secret that reaches it goes no further.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Received {
    /// `GET`, `POST`...
    pub method: String,
    /// The request target (path and query).
    pub path: String,
    /// Header fields, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Received {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A running server. It stops when the test process ends.
pub struct ApiServer {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The test CA's certificate (PEM file): trust it to verify this server.
    pub ca: PathBuf,
    received: Arc<Mutex<Vec<Received>>>,
    delay_ms: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl ApiServer {
    /// Starts a server with a certificate for `names`, issued by a fresh test CA.
    pub fn start(names: &[&str]) -> ApiServer {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "nestbox test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let ca_path = dir.path().join("test-ca.pem");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(names)
            .unwrap()
            .signed_by(&leaf_key, &ca)
            .unwrap();
        let chain = vec![leaf.der().clone(), ca.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (r, d) = (received.clone(), delay_ms.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { return };
                let (r, d, c) = (r.clone(), d.clone(), config.clone());
                std::thread::spawn(move || serve(s, c, &r, &d));
            }
        });
        ApiServer {
            port,
            ca: ca_path,
            received,
            delay_ms,
            _dir: dir,
        }
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits this long before answering each request (to interrupt it midway).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }
}

fn serve(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
    received: &Mutex<Vec<Received>>,
    delay_ms: &AtomicU64,
) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let tls = StreamOwned::new(conn, tcp);
    let mut reader = BufReader::new(tls);
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
            return;
        };
        let (method, path) = (method.to_string(), path.to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len.min(64 << 20)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        received.lock().unwrap().push(Received {
            method,
            path,
            headers,
            body,
        });
        let delay = delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        let answer = b"{\"ok\":true}\n";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        let s = reader.get_mut();
        if s.write_all(head.as_bytes()).is_err() || s.write_all(answer).is_err() {
            return;
        }
        let _ = s.flush();
    }
}
