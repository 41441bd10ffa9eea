//! The relay's process-level setup and its life span: file descriptor limit, SIGPIPE, the
//! readiness byte, and the fds whose readability ends the relay (the step's pidfd).

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::task::Poll;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (every tunnel holds two sockets and up to
/// four pipe ends). Returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}

/// splice(2) into a socket whose peer is gone raises SIGPIPE; the relay wants EPIPE instead.
pub(crate) fn ignore_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_IGN has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Writes the readiness byte and closes the fd. A reader that went away is not an error worth
/// stopping for: the relay serves anyway.
pub(crate) fn signal_ready(fd: OwnedFd) {
    let byte = [b'R'];
    // SAFETY: write of one byte from a live buffer to an fd we own.
    unsafe {
        libc::write(fd.as_raw_fd(), byte.as_ptr().cast(), 1);
    }
    drop(fd);
}

/// The fds whose readability ends the relay: pidfds of the step (readable when the process
/// exits), or any fd that becomes readable at the right moment (a pipe whose writer closes).
pub(crate) struct Watch {
    fds: Vec<AsyncFd<OwnedFd>>,
}

impl Watch {
    /// Registers the fds with the reactor (they must support epoll, as pidfds and pipes do).
    pub fn new(fds: Vec<OwnedFd>) -> io::Result<Watch> {
        let fds = fds
            .into_iter()
            // SAFETY: an OwnedFd stays open, and is the same fd, until the AsyncFd drops it.
            .map(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Watch { fds })
    }

    /// Completes when any fd is readable; never, when there are none.
    pub async fn any_readable(&self) {
        poll_fn(|cx| {
            for fd in &self.fds {
                if fd.poll_read_ready(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
        .await
    }
}
