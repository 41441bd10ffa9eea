//! Egress for a container that has no network (`NetworkMode: none`): a relay whose listener
//! lives inside the container's network namespace, as the cage's netns mode does for a step.
//!
//! The listener is created by a thread that joins the namespace of the container's init
//! (`setns` on `/proc/<pid>/ns/net`, which needs root on the host, as a rootful engine does)
//! and binds `127.0.0.1:0` there; the relay (`nestbox relay`, this host's own process, outside
//! the container) accepts on it and dials from the host's namespace, with the allowlist. The
//! container's commands get `HTTPS_PROXY` and friends pointing at it. A program in the
//! container that ignores them has no route anywhere: the namespace holds only `lo`.
//!
//! The relay lives as long as the backend that started it (it watches this process's pidfd, and
//! is killed on close): background jobs that outlive the session lose their network with it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use bollard::Docker;

use crate::backend::BackendKind;
use crate::error::{ExecError, Result};

/// A relay serving one container.
pub(crate) struct ContainerRelay {
    child: std::process::Child,
    /// Where the relay listens, inside the container.
    pub port: u16,
}

impl ContainerRelay {
    /// The proxy variables a command in the container gets.
    pub fn env(&self) -> Vec<(String, String)> {
        nestbox_policy::proxy_env::relay_env(self.port)
    }
}

impl Drop for ContainerRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unavailable(reason: String) -> ExecError {
    ExecError::Unavailable {
        backend: BackendKind::Docker,
        reason,
        hint: Some(
            "allow_hosts needs nestbox to run as root beside a rootful engine (it joins the container's network namespace to give it a relay); without allow_hosts the container has no network".into(),
        ),
    }
}

/// Creates a listening socket on 127.0.0.1 inside the network namespace of `pid`.
fn listen_in_namespace_of(pid: i64) -> std::result::Result<(OwnedFd, u16), String> {
    // A thread of our own joins the namespace and ends: no other thread's namespace changes.
    std::thread::spawn(move || -> std::result::Result<(OwnedFd, u16), String> {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|e| format!("opening the container's network namespace: {e}"))?;
        // SAFETY: setns on this thread only, with a namespace fd we hold.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(format!(
                "joining the container's network namespace: {}",
                std::io::Error::last_os_error()
            ));
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("listening inside the container: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        Ok((OwnedFd::from(listener), port))
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_string())?
}

fn pipe() -> std::result::Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts a relay for `container` allowing `allow`, with `nestbox` as the relay program.
pub(crate) async fn start(
    docker: &Docker,
    container: &str,
    allow: &[String],
    nestbox: &Path,
) -> Result<ContainerRelay> {
    let state = docker
        .inspect_container(container, None)
        .await
        .map_err(|e| crate::docker::exec::engine_error("inspect the container", e))?
        .state
        .unwrap_or_default();
    let pid = state.pid.filter(|p| *p > 0).ok_or_else(|| {
        unavailable("the container's init has no pid (the container is not running)".into())
    })?;
    let (listener, port) = listen_in_namespace_of(pid).map_err(unavailable)?;
    let (ready_r, ready_w) = pipe().map_err(unavailable)?;
    // SAFETY: pidfd_open with integer arguments; a fresh descriptor we then own.
    let me = unsafe { libc::syscall(libc::SYS_pidfd_open, std::process::id(), 0) };
    if me < 0 {
        return Err(unavailable(format!(
            "pidfd of this process: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the kernel just returned this descriptor.
    let me = unsafe { OwnedFd::from_raw_fd(me as RawFd) };
    let mut cmd = std::process::Command::new(nestbox);
    cmd.args([
        "relay",
        "--listen-fd=3",
        "--ready-fd=4",
        "--watch-pidfd=5",
        &format!(
            "--step-id=container-{}",
            &container[..12.min(container.len())]
        ),
    ]);
    for a in allow {
        cmd.arg(format!("--allow={a}"));
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let fds = [listener.as_raw_fd(), ready_w.as_raw_fd(), me.as_raw_fd()];
    // SAFETY: between fork and exec only dup2 and fcntl on descriptors we hold.
    unsafe {
        cmd.pre_exec(move || {
            for (i, &fd) in fds.iter().enumerate() {
                let target = 3 + i as RawFd;
                let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 16);
                if moved < 0 || libc::dup2(moved, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| unavailable(format!("starting {} relay: {e}", nestbox.display())))?;
    drop(listener);
    drop(ready_w);
    // Preset discovery can take a while: wait up to 20 s for the relay's one byte.
    let ready = tokio::task::spawn_blocking(move || {
        let mut p = libc::pollfd {
            fd: ready_r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; then one byte into a stack buffer.
        unsafe {
            libc::poll(
                &mut p,
                1,
                Duration::from_secs(20).as_millis() as libc::c_int,
            ) == 1
                && {
                    let mut b = [0u8; 1];
                    libc::read(ready_r.as_raw_fd(), b.as_mut_ptr().cast(), 1) == 1
                }
        }
    })
    .await
    .unwrap_or(false);
    if !ready {
        let _ = child.kill();
        let out = child
            .wait_with_output()
            .map(|o| o.stderr)
            .unwrap_or_default();
        let said = String::from_utf8_lossy(&out);
        return Err(unavailable(format!(
            "the relay did not start: {}",
            said.trim().trim_start_matches("nestbox relay: ")
        )));
    }
    // Its later warnings are not ours to hold a pipe open for.
    drop(child.stderr.take());
    Ok(ContainerRelay { child, port })
}
