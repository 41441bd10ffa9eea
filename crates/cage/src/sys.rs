//! Thin wrappers over the raw system calls the cage needs and libc does not wrap.
//!
//! Everything here is a direct syscall: no allocation, safe to call between fork and exec.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// `-1` becomes the thread's errno as an `io::Error`; anything else is returned.
pub(crate) fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Same as [`check`] for the `c_int` results of libc wrappers.
pub(crate) fn check_int(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The raw errno value of the last failed call (for the child's error report, which must not
/// allocate).
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location always returns a valid thread-local pointer.
    unsafe { *libc::__errno_location() }
}

/// `pidfd_open(2)`: a file descriptor that becomes readable when the process exits, and that
/// keeps naming that process even after its pid is reused.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel returned a fresh descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(2)`: signal the process a pidfd names, immune to pid reuse.
pub fn pidfd_send_signal(pidfd: RawFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall; a null siginfo means "as kill(2) would".
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// Landlock system calls and constants (`linux/landlock.h`).
pub(crate) mod landlock {
    use super::check;
    use std::io;

    pub const CREATE_RULESET_VERSION: u32 = 1 << 0;
    pub const RULE_PATH_BENEATH: libc::c_int = 1;
    pub const RULE_NET_PORT: libc::c_int = 2;

    /// `struct landlock_ruleset_attr` as of ABI 6 (the kernel accepts shorter sizes for older ABIs).
    #[repr(C)]
    #[derive(Default)]
    pub struct RulesetAttr {
        pub handled_access_fs: u64,
        pub handled_access_net: u64,
        pub scoped: u64,
    }

    /// `struct landlock_path_beneath_attr` (packed in the UAPI header).
    #[repr(C, packed)]
    pub struct PathBeneathAttr {
        pub allowed_access: u64,
        pub parent_fd: i32,
    }

    /// `struct landlock_net_port_attr`.
    #[repr(C)]
    pub struct NetPortAttr {
        pub allowed_access: u64,
        pub port: u64,
    }

    /// The highest Landlock ABI the kernel offers, or the errno that says why there is none
    /// (ENOSYS: not built in; EOPNOTSUPP: disabled at boot).
    pub fn abi_version() -> Result<u32, io::Error> {
        // SAFETY: the VERSION query takes a null attribute and size 0.
        let v = check(unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        })?;
        Ok(v as u32)
    }

    /// Creates a ruleset. `size` selects how much of `attr` the kernel reads (older ABIs do not
    /// know `scoped` or `handled_access_net`).
    pub fn create_ruleset(attr: &RulesetAttr, size: usize) -> io::Result<libc::c_long> {
        // SAFETY: attr points to a live struct of at least `size` bytes.
        check(unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                attr as *const RulesetAttr,
                size,
                0u32,
            )
        })
    }

    pub fn add_path_rule(ruleset: i32, attr: &PathBeneathAttr) -> io::Result<()> {
        // SAFETY: attr is a live, correctly laid out struct.
        check(unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                RULE_PATH_BENEATH,
                attr as *const PathBeneathAttr,
                0u32,
            )
        })
        .map(drop)
    }

    pub fn add_port_rule(ruleset: i32, attr: &NetPortAttr) -> io::Result<()> {
        // SAFETY: attr is a live, correctly laid out struct.
        check(unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                RULE_NET_PORT,
                attr as *const NetPortAttr,
                0u32,
            )
        })
        .map(drop)
    }

    /// Enforces the ruleset on the calling thread (and what it execs). Async-signal-safe.
    pub fn restrict_self(ruleset: i32) -> libc::c_long {
        // SAFETY: plain syscall with integer arguments.
        unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) }
    }
}
