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
    /// `HTTP/1.1` or `HTTP/2`.
    pub version: String,
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
        ApiServer::start_with(names, false)
    }

    /// Starts a server that also speaks HTTP/2 (chosen by ALPN), served by hyper.
    pub fn start_h2(names: &[&str]) -> ApiServer {
        ApiServer::start_with(names, true)
    }

    fn start_with(names: &[&str], h2: bool) -> ApiServer {
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
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (r, d) = (received.clone(), delay_ms.clone());
        if h2 {
            std::thread::spawn(move || h2_server::serve(listener, config, r));
            return ApiServer {
                port,
                ca: ca_path,
                received,
                delay_ms,
                _dir: dir,
            };
        }
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
            version: "HTTP/1.1".into(),
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

/// The HTTP/2-capable variant, on hyper.
mod h2_server {
    use std::convert::Infallible;
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use rustls::ServerConfig;

    use super::Received;

    #[derive(Clone)]
    struct Exec;

    impl<F> hyper::rt::Executor<F> for Exec
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        fn execute(&self, fut: F) {
            tokio::spawn(fut);
        }
    }

    /// Tokio's streams seen as hyper's (test-only twin of the gateway's adapter).
    struct Io<T>(T);

    impl<T: tokio::io::AsyncRead + Unpin> hyper::rt::Read for Io<T> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            mut buf: hyper::rt::ReadBufCursor<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            // SAFETY: tokio only writes into the buffer, and we advance by what it filled.
            let n = unsafe {
                let mut t = tokio::io::ReadBuf::uninit(buf.as_mut());
                match std::pin::Pin::new(&mut self.0).poll_read(cx, &mut t) {
                    std::task::Poll::Ready(Ok(())) => t.filled().len(),
                    other => return other,
                }
            };
            // SAFETY: `n` bytes were initialized by the read.
            unsafe { buf.advance(n) };
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl<T: tokio::io::AsyncWrite + Unpin> hyper::rt::Write for Io<T> {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.0).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    pub(super) fn serve(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        received: Arc<Mutex<Vec<Received>>>,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, received) = (acceptor.clone(), received.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let received = received.clone();
                            async move {
                                let version = if req.version() == hyper::Version::HTTP_2 {
                                    "HTTP/2"
                                } else {
                                    "HTTP/1.1"
                                };
                                let (parts, body) = req.into_parts();
                                let body = body
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes().to_vec())
                                    .unwrap_or_default();
                                let headers = parts
                                    .headers
                                    .iter()
                                    .map(|(n, v)| {
                                        (
                                            n.as_str().to_string(),
                                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                        )
                                    })
                                    .collect();
                                received.lock().unwrap().push(Received {
                                    method: parts.method.to_string(),
                                    path: parts
                                        .uri
                                        .path_and_query()
                                        .map(|p| p.to_string())
                                        .unwrap_or_default(),
                                    headers,
                                    body,
                                    version: version.into(),
                                });
                                let mut r = hyper::Response::new(Full::new(Bytes::from_static(
                                    b"{\"ok\":true}\n",
                                )));
                                r.headers_mut().insert(
                                    "content-type",
                                    hyper::header::HeaderValue::from_static("application/json"),
                                );
                                Ok::<_, Infallible>(r)
                            }
                        },
                    );
                    if h2 {
                        let _ = hyper::server::conn::http2::Builder::new(Exec)
                            .serve_connection(Io(tls), service)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(Io(tls), service)
                            .await;
                    }
                });
            }
        });
    }
}
