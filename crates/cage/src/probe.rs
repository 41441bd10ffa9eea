//! What this kernel offers, asked of the kernel itself (never guessed from its version):
//! Landlock ABI, seccomp filters, user and network namespaces, io_uring, x32 and i386 entry.
//! `nestbox probe` prints it, and says what `nestbox run` will therefore enforce.

use serde::Serialize;

use crate::landlock::{self, REQUIRED};

/// The kernel's answers.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub kernel: String,
    pub arch: &'static str,
    pub landlock: LandlockProbe,
    pub seccomp: FeatureProbe,
    pub user_namespaces: FeatureProbe,
    pub network_namespaces: FeatureProbe,
    /// io_uring present in the kernel (the cage blocks it either way).
    pub io_uring: FeatureProbe,
    /// x32 syscall entry enabled (the cage's filter refuses it either way).
    pub x32: FeatureProbe,
    /// 32-bit `int 0x80` entry enabled (the cage's filter refuses it either way).
    pub ia32: FeatureProbe,
    pub running_as_root: bool,
    /// What `nestbox run` will do on this kernel.
    pub run_will: RunPlan,
}

#[derive(Clone, Debug, Serialize)]
pub struct LandlockProbe {
    pub available: bool,
    pub abi: u32,
    pub detail: String,
    pub fs_rights: Vec<&'static str>,
    pub tcp_rules: bool,
    pub scopes: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FeatureProbe {
    pub available: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunPlan {
    /// `full`, or `refuse` (without `--best-effort`) when something required is missing.
    pub cage: &'static str,
    pub missing: Vec<String>,
    /// `netns` or `port`: how a step with network access would be kept to its relay.
    pub network_mode: &'static str,
}

fn feature(available: bool, detail: impl Into<String>) -> FeatureProbe {
    FeatureProbe {
        available,
        detail: detail.into(),
    }
}

/// Runs `f` in a forked child and reports whether it exited 0 (used for probes that change the
/// process, such as unshare, or may crash it, such as `int 0x80`).
fn in_child(f: fn() -> bool) -> Option<bool> {
    // SAFETY: the probe runs before any thread is started; the child only makes system calls
    // and exits.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return None;
        }
        if pid == 0 {
            libc::_exit(if f() { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        Some(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
    }
}

/// Whether this process can give a step its own network namespace (netns mode): asked of the
/// kernel in a throwaway child, directly as root or through a new user namespace otherwise.
pub fn can_create_netns() -> bool {
    in_child(netns_child).unwrap_or(false)
}

fn userns_child() -> bool {
    // SAFETY: unshare in a throwaway child.
    unsafe { libc::unshare(libc::CLONE_NEWUSER) == 0 }
}

fn netns_child() -> bool {
    // SAFETY: unshare in a throwaway child (as an unprivileged user this needs a user namespace).
    unsafe {
        libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0
            || libc::unshare(libc::CLONE_NEWNET) == 0
    }
}

#[cfg(target_arch = "x86_64")]
fn ia32_child() -> bool {
    let ret: i64;
    // SAFETY: int 0x80 with eax=20 (i386 getpid) in a throwaway child; if 32-bit entry is off
    // the kernel raises SIGSEGV, which kills only this child.
    unsafe {
        std::arch::asm!("int 0x80", inlateout("rax") 20i64 => ret, options(nostack));
        ret == i64::from(libc::getpid())
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn ia32_child() -> bool {
    false
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Asks the kernel. Forks a few throwaway children; call before starting threads.
pub fn probe() -> Probe {
    let abi = landlock::kernel_abi();
    let landlock = match &abi {
        Ok(v) => LandlockProbe {
            available: true,
            abi: *v,
            detail: format!("Landlock ABI {v}"),
            fs_rights: landlock::fs::names(landlock::fs::all_at(*v)),
            tcp_rules: *v >= 4,
            scopes: if *v >= 6 {
                vec!["signal", "abstract_unix_socket"]
            } else {
                vec![]
            },
        },
        Err(e) => LandlockProbe {
            available: false,
            abi: 0,
            detail: landlock::unavailable_reason(e),
            fs_rights: vec![],
            tcp_rules: false,
            scopes: vec![],
        },
    };
    let seccomp = match crate::seccomp::available() {
        Ok(()) => feature(true, "seccomp filters with SECCOMP_RET_ERRNO"),
        Err(e) => feature(false, format!("unavailable: {e}")),
    };
    let userns = in_child(userns_child).unwrap_or(false);
    let netns = in_child(netns_child).unwrap_or(false);
    // SAFETY: io_uring_setup with zero entries and a null params pointer only validates.
    let uring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 0u32, std::ptr::null::<u8>()) };
    let uring_errno = std::io::Error::last_os_error();
    let io_uring = match (uring, uring_errno.raw_os_error()) {
        (_, Some(libc::ENOSYS)) => feature(false, "not built into this kernel"),
        (_, Some(libc::EPERM)) => feature(false, "disabled by kernel.io_uring_disabled"),
        _ => feature(true, "present (the cage's seccomp filter refuses it)"),
    };
    let x32 = if cfg!(target_arch = "x86_64") {
        // SAFETY: getpid through the x32 entry: ENOSYS when x32 is off.
        let r = unsafe { libc::syscall(libc::SYS_getpid | 0x4000_0000) };
        if r < 0 {
            feature(
                false,
                "x32 entry disabled (ENOSYS); the filter refuses it anyway",
            )
        } else {
            feature(true, "x32 entry enabled (the cage's filter refuses it)")
        }
    } else {
        feature(false, "not x86_64")
    };
    let ia32 = match in_child(ia32_child) {
        Some(true) => feature(
            true,
            "int 0x80 entry enabled (the cage's filter refuses foreign-arch calls)",
        ),
        _ => feature(false, "int 0x80 entry disabled or not x86_64"),
    };
    let kernel_abi = abi.as_ref().map(|v| *v).unwrap_or(0);
    let mut missing: Vec<String> = REQUIRED
        .iter()
        .filter(|f| f.abi > kernel_abi)
        .map(|f| format!("Landlock {} (ABI {})", f.name, f.abi))
        .collect();
    if !seccomp.available {
        missing.push("seccomp filters".into());
    }
    Probe {
        kernel: kernel_release(),
        arch: if cfg!(target_arch = "x86_64") {
            "x86_64"
        } else {
            "aarch64"
        },
        landlock,
        seccomp,
        user_namespaces: feature(
            userns,
            if userns {
                "unprivileged user namespaces can be created"
            } else {
                "cannot create user namespaces"
            },
        ),
        network_namespaces: feature(
            netns,
            if netns {
                "network namespaces can be created"
            } else {
                "cannot create network namespaces"
            },
        ),
        io_uring,
        x32,
        ia32,
        // SAFETY: trivial getter.
        running_as_root: unsafe { libc::geteuid() } == 0,
        run_will: RunPlan {
            cage: if missing.is_empty() { "full" } else { "refuse" },
            missing,
            network_mode: if netns { "netns" } else { "port" },
        },
    }
}
