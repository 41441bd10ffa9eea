//! The relay lives exactly as long as its step: it signals readiness once it accepts, and
//! exits when the step's pidfd becomes readable.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use nestbox_net::{Lifecycle, RelayConfig, serve};
use nestbox_policy::Allowlist;

fn pidfd_open(pid: u32) -> OwnedFd {
    // SAFETY: raw syscall; a negative result is checked before the fd is owned.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    // SAFETY: the kernel just returned this fd to us.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

#[test]
fn relay_exits_when_the_step_process_exits() {
    let mut step = Command::new("sleep").arg("0.5").spawn().unwrap();
    let pidfd = pidfd_open(step.id());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let started = Instant::now();
    let relay = std::thread::spawn(move || {
        serve(
            listener,
            RelayConfig::new(Allowlist::new()),
            Lifecycle {
                ready: None,
                watch: vec![pidfd],
            },
        )
    });
    // serving while the step runs
    std::thread::sleep(Duration::from_millis(100));
    assert!(std::net::TcpStream::connect(addr).is_ok());
    step.wait().unwrap();
    relay.join().unwrap().unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn relay_accepts_once_it_has_written_its_ready_byte() {
    // Relay::start waits for the byte, then connects at once: any race would fail here
    for _ in 0..20 {
        let relay = crate::support::Relay::builder().start();
        let (_s, r) = relay.connect_to("x.example:443");
        assert_eq!(r.status, 403);
    }
}

#[test]
fn relay_serves_a_listener_it_did_not_bind_itself() {
    // the launcher creates the listener (in the step's netns) and passes it as an fd
    use std::os::fd::{AsRawFd, IntoRawFd};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // SAFETY: dup of an open fd; the original is dropped, the copy owned below.
    let dup = unsafe { libc::fcntl(listener.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    // SAFETY: closing the original fd, which nothing else uses.
    unsafe { libc::close(listener.into_raw_fd()) };
    // SAFETY: dup is a new fd owned by nobody else.
    let passed = unsafe { std::net::TcpListener::from_raw_fd(dup) };
    let (stop_r, stop_w) = crate::support::pipe();
    let t = std::thread::spawn(move || {
        serve(
            passed,
            RelayConfig::new(Allowlist::new()),
            Lifecycle {
                ready: None,
                watch: vec![stop_r],
            },
        )
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    use std::io::Write;
    s.write_all(b"CONNECT a.example:443 HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(crate::support::read_response(&mut s).status, 403);
    drop(stop_w);
    t.join().unwrap().unwrap();
}
