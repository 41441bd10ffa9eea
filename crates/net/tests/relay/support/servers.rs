//! Small servers on loopback for the relay to reach: an echo server and a destination that
//! never answers (the HTTP server is `nestbox_testkit::http`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Echoes every byte back; counts connections and bytes received.
pub struct Echo {
    pub addr: SocketAddr,
    received: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

impl Echo {
    /// On 127.0.0.1, a free port.
    pub fn start() -> Echo {
        Echo::start_on("127.0.0.1:0")
    }

    /// On `addr` (e.g. `[::1]:0`).
    pub fn start_on(addr: &str) -> Echo {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (r, c) = (received.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                c.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                r.fetch_add(n, Ordering::SeqCst);
                                if s.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Echo {
            addr,
            received,
            connections,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Bytes received so far, over all connections.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A listener whose accept queue is full, so a further connect hangs in SYN-SENT: a destination
/// that never answers, on loopback. Keep the value alive while it is needed.
pub struct Blackhole {
    pub addr: SocketAddr,
    _listener: socket_hold::Held,
}

mod socket_hold {
    use std::net::{TcpListener, TcpStream};

    pub struct Held {
        pub _listener: TcpListener,
        pub _fillers: Vec<TcpStream>,
    }
}

impl Blackhole {
    pub fn start() -> Blackhole {
        // backlog 0: the kernel still queues one connection; fill it, then SYNs are dropped
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0);
        let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let rc = unsafe {
            libc::bind(
                fd,
                (&sin as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(unsafe { libc::listen(fd, 0) }, 0);
        use std::os::fd::FromRawFd;
        let listener = unsafe { TcpListener::from_raw_fd(fd) };
        let addr = listener.local_addr().unwrap();
        let mut fillers = Vec::new();
        for _ in 0..4 {
            // connect without blocking for long: some of these may themselves hang
            let s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
            match s {
                Ok(s) => fillers.push(s),
                Err(_) => break,
            }
        }
        Blackhole {
            addr,
            _listener: socket_hold::Held {
                _listener: listener,
                _fillers: fillers,
            },
        }
    }
}
