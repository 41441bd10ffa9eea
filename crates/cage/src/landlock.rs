//! Landlock: which files the step may read, write and execute, which TCP ports it may reach,
//! and the scopes that keep it from signalling or reaching abstract sockets outside its domain.
//!
//! The ruleset is built in the launcher (it needs `open` and allocations); the child only calls
//! `landlock_restrict_self` on the finished ruleset, which is async-signal-safe.
//!
//! **Fail closed.** Each protection has the ABI version that brought it. When the kernel's ABI
//! is too old for something the policy relies on, [`negotiate`] refuses unless the caller asked
//! for best effort, and then it lists exactly what was dropped.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use serde::Serialize;

use crate::sys::landlock as raw;

/// Filesystem access rights (`LANDLOCK_ACCESS_FS_*`).
pub mod fs {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const REMOVE_DIR: u64 = 1 << 4;
    pub const REMOVE_FILE: u64 = 1 << 5;
    pub const MAKE_CHAR: u64 = 1 << 6;
    pub const MAKE_DIR: u64 = 1 << 7;
    pub const MAKE_REG: u64 = 1 << 8;
    pub const MAKE_SOCK: u64 = 1 << 9;
    pub const MAKE_FIFO: u64 = 1 << 10;
    pub const MAKE_BLOCK: u64 = 1 << 11;
    pub const MAKE_SYM: u64 = 1 << 12;
    /// ABI 2: link or rename a file into another directory.
    pub const REFER: u64 = 1 << 13;
    /// ABI 3: truncate(2), ftruncate(2) and open with O_TRUNC.
    pub const TRUNCATE: u64 = 1 << 14;
    /// ABI 5: ioctl(2) on character and block devices.
    pub const IOCTL_DEV: u64 = 1 << 15;

    /// The rights that make sense on a file (not a directory) rule.
    pub const FILE_ONLY: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;

    /// All rights the kernel knows at `abi`.
    pub fn all_at(abi: u32) -> u64 {
        let mut all = (1 << 13) - 1;
        if abi >= 2 {
            all |= REFER;
        }
        if abi >= 3 {
            all |= TRUNCATE;
        }
        if abi >= 5 {
            all |= IOCTL_DEV;
        }
        all
    }

    /// Human names, for reports.
    pub fn names(mask: u64) -> Vec<&'static str> {
        const NAMES: [&str; 16] = [
            "execute",
            "write_file",
            "read_file",
            "read_dir",
            "remove_dir",
            "remove_file",
            "make_char",
            "make_dir",
            "make_reg",
            "make_sock",
            "make_fifo",
            "make_block",
            "make_sym",
            "refer",
            "truncate",
            "ioctl_dev",
        ];
        (0..16)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| NAMES[i])
            .collect()
    }
}

/// TCP rights (`LANDLOCK_ACCESS_NET_*`, ABI 4).
pub mod net {
    pub const BIND_TCP: u64 = 1 << 0;
    pub const CONNECT_TCP: u64 = 1 << 1;
}

/// Scopes (`LANDLOCK_SCOPE_*`, ABI 6).
pub mod scope {
    pub const ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
    pub const SIGNAL: u64 = 1 << 1;
}

/// The highest ABI whose rights nestbox uses. Later ABIs add audit logging and rights the
/// seccomp filter already covers; the report still shows the kernel's own ABI.
pub const TARGET_ABI: u32 = 6;

/// A protection the policy relies on and the Landlock ABI that brought it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Feature {
    pub name: &'static str,
    pub abi: u32,
    /// What is lost without it, in words.
    pub without: &'static str,
}

/// Protections nestbox requires for a full cage, oldest first.
pub const REQUIRED: &[Feature] = &[
    Feature {
        name: "filesystem rules",
        abi: 1,
        without: "the step could read and write every file its user can",
    },
    Feature {
        name: "truncate rights",
        abi: 3,
        without: "the step could truncate files outside its write list",
    },
    Feature {
        name: "TCP port rules",
        abi: 4,
        without: "the step could open TCP connections to any host and port",
    },
    Feature {
        name: "signal scoping",
        abi: 6,
        without: "the step could signal processes of its user outside the cage",
    },
    Feature {
        name: "abstract unix socket scoping",
        abi: 6,
        without: "only the seccomp filter would keep the step from abstract unix sockets",
    },
];

/// The outcome of matching what the kernel offers against what the cage requires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Negotiated {
    /// The kernel's Landlock ABI (0 when Landlock is unavailable).
    pub kernel_abi: u32,
    /// The ABI whose rights the ruleset handles (0: Landlock not used).
    pub abi: u32,
    /// Required protections this kernel cannot give (only non-empty with best effort).
    pub dropped: Vec<Feature>,
}

/// Why Landlock cannot be used at all, as the kernel said it.
pub fn unavailable_reason(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel was built without Landlock (ENOSYS)".into(),
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built in but not enabled at boot (EOPNOTSUPP; add `landlock` to the `lsm=` kernel parameter)".into()
        }
        _ => format!("landlock_create_ruleset failed: {err}"),
    }
}

/// Decides which ABI to use. `kernel` is [`raw::abi_version`]'s answer.
///
/// Without best effort, any missing required protection is an error naming each one; with it,
/// the missing ones are returned in `dropped`, and the caller must report them.
pub fn negotiate(kernel: Result<u32, io::Error>, best_effort: bool) -> Result<Negotiated, String> {
    let kernel_abi = match kernel {
        Ok(v) => v,
        Err(e) if best_effort => {
            let _ = e;
            return Ok(Negotiated {
                kernel_abi: 0,
                abi: 0,
                dropped: REQUIRED.to_vec(),
            });
        }
        Err(e) => {
            return Err(format!(
                "Landlock is unavailable: {}. Without it nothing restricts what the step reads, writes or connects to, so nestbox refuses to run it. `--best-effort` runs it with the seccomp filter only and reports what was dropped",
                unavailable_reason(&e)
            ));
        }
    };
    let dropped: Vec<Feature> = REQUIRED
        .iter()
        .copied()
        .filter(|f| f.abi > kernel_abi)
        .collect();
    if !dropped.is_empty() && !best_effort {
        let list: Vec<String> = dropped
            .iter()
            .map(|f| format!("{} (ABI {}: without it {})", f.name, f.abi, f.without))
            .collect();
        return Err(format!(
            "this kernel offers Landlock ABI {kernel_abi}, but a full cage needs ABI {TARGET_ABI}; missing: {}. nestbox refuses to run with less (fail closed). `--best-effort` runs without them and reports what was dropped",
            list.join("; ")
        ));
    }
    Ok(Negotiated {
        kernel_abi,
        abi: kernel_abi.min(TARGET_ABI),
        dropped,
    })
}

/// A Landlock ruleset under construction (in the launcher), then enforced (in the child).
#[derive(Debug)]
pub struct Ruleset {
    fd: OwnedFd,
    pub abi: u32,
    pub handled_fs: u64,
    pub handled_net: u64,
    pub scoped: u64,
}

impl Ruleset {
    /// Creates a ruleset handling every right known at `abi`: whatever is not granted by a rule
    /// is denied. With `handle_tcp` false, TCP is left to another boundary (the step's own
    /// network namespace).
    pub fn create(abi: u32, handle_tcp: bool) -> io::Result<Ruleset> {
        let mut attr = raw::RulesetAttr {
            handled_access_fs: fs::all_at(abi),
            ..Default::default()
        };
        let mut size = std::mem::size_of::<u64>();
        if abi >= 4 && handle_tcp {
            attr.handled_access_net = net::BIND_TCP | net::CONNECT_TCP;
            size = 2 * std::mem::size_of::<u64>();
        }
        if abi >= 6 {
            attr.scoped = scope::ABSTRACT_UNIX_SOCKET | scope::SIGNAL;
            size = std::mem::size_of::<raw::RulesetAttr>();
        } else if abi >= 4 && !handle_tcp {
            size = 2 * std::mem::size_of::<u64>();
        }

        let fd = raw::create_ruleset(&attr, size)?;
        Ok(Ruleset {
            // SAFETY: a fresh descriptor from the kernel (O_CLOEXEC is implied by Landlock).
            fd: unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
            abi,
            handled_fs: attr.handled_access_fs,
            handled_net: attr.handled_access_net,
            scoped: attr.scoped,
        })
    }

    /// Grants `access` beneath the file or directory `fd` refers to. Rights the ABI does not
    /// handle are dropped (they are not restricted anyway), and directory-only rights are
    /// dropped on files, as the kernel requires.
    pub fn allow_path(&self, fd: BorrowedFd<'_>, access: u64, is_dir: bool) -> io::Result<u64> {
        let mut allowed = access & self.handled_fs;
        if !is_dir {
            allowed &= fs::FILE_ONLY;
        }
        if allowed == 0 {
            return Ok(0);
        }
        raw::add_path_rule(
            self.fd.as_raw_fd(),
            &raw::PathBeneathAttr {
                allowed_access: allowed,
                parent_fd: fd.as_raw_fd(),
            },
        )?;
        Ok(allowed)
    }

    /// Allows TCP `access` (connect and/or bind) to `port`. Needs ABI 4.
    pub fn allow_port(&self, port: u16, access: u64) -> io::Result<()> {
        raw::add_port_rule(
            self.fd.as_raw_fd(),
            &raw::NetPortAttr {
                allowed_access: access & self.handled_net,
                port: u64::from(port),
            },
        )
    }

    /// The descriptor the child passes to `landlock_restrict_self`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Enforces a finished ruleset on the calling thread. Meant for the child between fork and
/// exec: no allocation, returns the raw syscall result.
pub fn restrict_self_raw(ruleset_fd: RawFd) -> libc::c_long {
    raw::restrict_self(ruleset_fd)
}

/// The kernel's Landlock ABI, or why there is none.
pub fn kernel_abi() -> io::Result<u32> {
    raw::abi_version()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enosys() -> io::Error {
        io::Error::from_raw_os_error(libc::ENOSYS)
    }

    #[test]
    fn full_abi_needs_nothing_dropped() {
        let n = negotiate(Ok(7), false).unwrap();
        assert_eq!((n.kernel_abi, n.abi), (7, 6));
        assert!(n.dropped.is_empty());
    }

    #[test]
    fn old_abi_is_refused_naming_each_missing_protection() {
        let e = negotiate(Ok(3), false).unwrap_err();
        assert!(e.contains("ABI 3"), "{e}");
        assert!(e.contains("TCP port rules"), "{e}");
        assert!(e.contains("signal scoping"), "{e}");
        assert!(!e.contains("truncate rights"), "{e}");
        assert!(e.contains("--best-effort"), "{e}");
    }

    #[test]
    fn old_abi_with_best_effort_lists_what_was_dropped() {
        let n = negotiate(Ok(4), true).unwrap();
        assert_eq!(n.abi, 4);
        let names: Vec<_> = n.dropped.iter().map(|f| f.name).collect();
        assert_eq!(names, ["signal scoping", "abstract unix socket scoping"]);
    }

    #[test]
    fn missing_landlock_is_refused_unless_best_effort() {
        let e = negotiate(Err(enosys()), false).unwrap_err();
        assert!(e.contains("ENOSYS") && e.contains("refuses"), "{e}");
        let n = negotiate(Err(enosys()), true).unwrap();
        assert_eq!(n.abi, 0);
        assert_eq!(n.dropped.len(), REQUIRED.len());
    }

    #[test]
    fn rights_per_abi_grow_monotonically() {
        let mut last = 0;
        for abi in 1..=TARGET_ABI {
            let all = fs::all_at(abi);
            assert_eq!(all & last, last);
            last = all;
        }
        assert_eq!(fs::all_at(1) & fs::TRUNCATE, 0);
        assert_ne!(fs::all_at(3) & fs::TRUNCATE, 0);
    }
}
