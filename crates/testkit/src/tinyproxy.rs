//! A real tinyproxy as the upstream proxy, started on a free loopback port with a generated
//! configuration. A missing tinyproxy fails the test with the command that installs it: an
//! upstream test that skips silently would prove nothing.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running tinyproxy, killed on drop.
pub struct Tinyproxy {
    pub port: u16,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tinyproxy {
    /// Starts tinyproxy; with `auth = Some((user, password))` it requires Basic proxy auth.
    pub fn start(auth: Option<(&str, &str)>) -> Tinyproxy {
        let found = Command::new("tinyproxy")
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            found.is_ok(),
            "tinyproxy is not installed; the upstream-chaining tests need a real one: \
             apt-get install -y tinyproxy"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let log = dir.path().join("tinyproxy.log");
        let mut conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 60\nMaxClients 100\n\
             LogFile \"{}\"\nLogLevel Info\nAllow 127.0.0.1\nDisableViaHeader Yes\n",
            log.display()
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // tinyproxy will not keep running as root: let it drop to nobody and write its log
            conf.push_str("User nobody\nGroup nogroup\n");
            let c = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
            // SAFETY: chown on a path we created; 65534 is nobody/nogroup on Debian.
            unsafe { libc::chown(c.as_ptr(), 65534, 65534) };
        }
        if let Some((user, pass)) = auth {
            conf.push_str(&format!("BasicAuth {user} {pass}\n"));
        }
        let conf_path = dir.path().join("tinyproxy.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut t = Tinyproxy {
            port,
            child,
            log,
            _dir: dir,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = t.child.try_wait() {
                panic!("tinyproxy exited with {status}; log: {}", t.log_text());
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "tinyproxy did not listen on {port} within 10 s; log: {}",
                t.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        t
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// tinyproxy's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
