//! A real TLS server (`openssl s_server -www`) with a throw-away certificate for `name.test`
//! and `other.test`, so real clients (curl with OpenSSL) can run TLS through the relay.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TlsServer {
    pub port: u16,
    pub ca: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl TlsServer {
    pub fn start() -> TlsServer {
        let dir = tempfile::tempdir().unwrap();
        let (key, cert) = (dir.path().join("key.pem"), dir.path().join("cert.pem"));
        let made = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=name.test"])
            .args(["-addext", "subjectAltName=DNS:name.test,DNS:other.test"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            matches!(made, Ok(s) if s.success()),
            "openssl is needed for the TLS tests: apt-get install -y openssl"
        );
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = Command::new("openssl")
            .args(["s_server", "-www", "-quiet", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("openssl s_server exited with {status}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "s_server did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsServer {
            port,
            ca: cert,
            child,
            _dir: dir,
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
