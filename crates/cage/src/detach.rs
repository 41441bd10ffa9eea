//! Starting a helper process detached (the relay): double fork, so it is nobody's descendant in
//! the step's tree; its own session, so a signal to the caller's process group does not reach
//! it; stdin, stdout and stderr on /dev/null, so it never holds the caller's pipes open (a
//! caller that captures output would otherwise wait for it); only the listed descriptors kept.
//!
//! The helper is told which processes to watch (pidfds) and exits when they do: it needs no
//! parent.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

use crate::sys;

/// Starts `program` with `argv` and the environment `envp`, with `fds[i]` open as descriptor
/// `3 + i` in the new process, stdin and stdout on /dev/null, stderr on `stderr` (or
/// /dev/null), and nothing else open. Returns once the intermediate process has exited.
pub fn spawn_detached(
    program: &CStr,
    argv: &[CString],
    envp: &[CString],
    fds: &[RawFd],
    stderr: Option<RawFd>,
) -> io::Result<()> {
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|c| c.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|c| c.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let devnull = c"/dev/null";
    // SAFETY: the launcher is single-threaded; both children only make raw system calls on
    // the data prepared above, then exec or exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            libc::setsid();
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // Move the sources out of the way first, so a source that sits on another's target
            // is not clobbered by the dup2 below.
            let mut moved = [0 as RawFd; 16];
            let n = fds.len().min(moved.len());
            let err = match stderr {
                Some(fd) => libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 64),
                None => -1,
            };
            for i in 0..n {
                moved[i] = libc::fcntl(fds[i], libc::F_DUPFD_CLOEXEC, 64);
                if moved[i] < 0 {
                    libc::_exit(126);
                }
            }
            for (i, &src) in moved.iter().enumerate().take(n) {
                if libc::dup2(src, 3 + i as RawFd) < 0 {
                    libc::_exit(126);
                }
            }
            let null = libc::open(devnull.as_ptr(), libc::O_RDWR);
            if null >= 0 {
                for std in 0..3 {
                    libc::dup2(null, std);
                }
            }
            if err >= 0 {
                libc::dup2(err, 2);
            }

            libc::syscall(
                libc::SYS_close_range,
                (3 + n) as u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            libc::_exit(127);
        }
        let mut status = 0;
        sys::check_int(libc::waitpid(pid, &mut status, 0))?;
    }
    Ok(())
}
