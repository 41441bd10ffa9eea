//! The step's own PID namespace and its init.
//!
//! When the kernel allows it (root, or unprivileged user namespaces), the launcher clones the
//! first process of the step into new PID and mount namespaces (and a user namespace when
//! unprivileged, and the network namespace in netns mode). That process is a tiny init, PID 1:
//!
//! - it mounts a fresh `/proc`, so the step sees only its own processes: no other process's
//!   command line (a token passed as an argument elsewhere on the machine) is visible;
//! - it forks the step proper (PID 2), reaps orphans, and forwards the signals the launcher
//!   sends it to every process of the namespace;
//! - when the step ends it kills what is left and reports the step's status; and when it dies,
//!   by any means (the launcher killed with SIGKILL takes it along through the parent-death
//!   signal), the kernel kills every process in the namespace. Nothing outlives the step.
//!
//! Everything here runs between clone and exec: raw system calls on prepared data only.

use std::ffi::CString;
use std::os::fd::RawFd;

use crate::plan::ChildPlan;
use crate::spawn::{Stage, fail, step_main};
use crate::sys;

/// What the launcher prepares for a step in its own PID namespace.
pub(crate) struct PidNsPlan {
    /// Also a user namespace (the launcher is not root).
    pub with_userns: bool,
    pub uid_map: CString,
    pub gid_map: CString,
    /// Where the launcher's command line lives in memory: the init, a copy of the launcher and
    /// PID 1 of the step's namespace, blanks it so the step cannot read the launcher's
    /// arguments in `/proc/1/cmdline`.
    pub argv_area: Option<(usize, usize)>,
}

/// `arg_start` and `arg_end` of this process, from `/proc/self/stat` (fields 48 and 49).
fn argv_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    let start = fields.get(45)?.parse().ok()?;
    let end = fields.get(46)?.parse().ok()?;
    (end > start).then_some((start, end))
}

impl PidNsPlan {
    pub fn new() -> PidNsPlan {
        // SAFETY: trivial getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        PidNsPlan {
            with_userns: uid != 0,
            uid_map: CString::new(format!("{uid} {uid} 1")).expect("no NUL"),
            gid_map: CString::new(format!("{gid} {gid} 1")).expect("no NUL"),
            argv_area: argv_area(),
        }
    }

    /// The flags for the clone that creates the init.
    pub fn clone_flags(&self, netns: bool) -> libc::c_ulong {
        let mut flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::SIGCHLD;
        if self.with_userns {
            flags |= libc::CLONE_NEWUSER;
        }
        if netns {
            flags |= libc::CLONE_NEWNET;
        }
        flags as libc::c_ulong
    }
}

/// Whether this machine is likely to let a step have its own PID, mount and network
/// namespaces (root, or unprivileged user namespaces allowed). Cheap: no process is created;
/// the attempt itself decides, and fails with [`crate::CageError::NamespacesUnavailable`].
pub fn likely_available() -> bool {
    // SAFETY: trivial getter.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    read("/proc/sys/user/max_user_namespaces").is_some_and(|v| v != "0")
        && read("/proc/sys/kernel/unprivileged_userns_clone").is_none_or(|v| v == "1")
        && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_none_or(|v| v == "0")
}

/// `clone(2)` with fork semantics (no new stack): returns 0 in the child.
pub(crate) unsafe fn raw_clone(flags: libc::c_ulong) -> libc::c_long {
    // SAFETY: with a null stack the child runs on a copy of the caller's stack, like fork.
    unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) }
}

unsafe fn read_byte(fd: RawFd) -> bool {
    let mut b = 0u8;
    // SAFETY: one byte into a stack variable.
    unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) == 1 }
}

/// The init of the step's PID namespace. `sync` is the launcher socket; `status` receives the
/// step's wait status and the number of leftovers killed.
///
/// # Safety
/// Runs in the child of [`raw_clone`], in a single-threaded launcher's copy.
pub(crate) unsafe fn init_main(plan: &ChildPlan, sync: RawFd, status: RawFd) -> ! {
    // SAFETY (whole body): raw system calls on prepared data.
    unsafe {
        // Die with the launcher; then the kernel takes the whole namespace along.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if let Some((start, end)) = plan.pid_ns.as_ref().and_then(|ns| ns.argv_area) {
            // Our own copy of the launcher's argument strings (e.g. an --upstream URL).
            std::ptr::write_bytes(start as *mut u8, 0, end - start);
            let name = b"nestbox-init";
            if end - start > name.len() {
                std::ptr::copy_nonoverlapping(name.as_ptr(), start as *mut u8, name.len());
            }
        }
        // The launcher writes our uid/gid maps first (or gave up: EOF).
        if !read_byte(sync) {
            libc::_exit(125);
        }
        let none = std::ptr::null::<libc::c_char>();
        if libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            fail(sync, Stage::PidNs, sys::errno());
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            fail(sync, Stage::PidNs, sys::errno());
        }
        if plan.empty_netns && !crate::netns::loopback_up() {
            fail(sync, Stage::Netns, sys::errno());
        }
        if let Some(netns) = &plan.netns {
            match crate::netns::listen_inside(netns.port) {
                Ok(listener) => {
                    let sent = crate::netns::send_fd(sync, listener);
                    libc::close(listener);
                    if !sent {
                        fail(sync, Stage::Netns, sys::errno());
                    }
                }
                Err(errno) => fail(sync, Stage::Netns, errno),
            }
        }
        // Hold until the launcher has started the relay and placed us in the cgroup.
        if !read_byte(sync) {
            libc::_exit(125);
        }
        let step = raw_clone(libc::SIGCHLD as libc::c_ulong);
        if step < 0 {
            fail(sync, Stage::PidNs, sys::errno());
        }
        if step == 0 {
            libc::close(status);
            step_main(plan, sync, 1, false, true);
        }
        // The step holds the launcher socket until its exec closes it: end-of-file then means
        // "running", so the init must not keep a copy.
        libc::close(sync);
        supervise(step as libc::pid_t, status)
    }
}

/// Reaps, forwards signals, and reports when the step ends.
unsafe fn supervise(step: libc::pid_t, status: RawFd) -> ! {
    // SAFETY (whole body): raw system calls on local data.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGCHLD,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::sigaddset(&mut set, s);
        }
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        let mut step_status: Option<libc::c_int> = None;
        while step_status.is_none() {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&set, &mut info);
            if sig == libc::SIGCHLD {
                loop {
                    let mut st = 0;
                    let p = libc::waitpid(-1, &mut st, libc::WNOHANG);
                    if p <= 0 {
                        break;
                    }
                    if p == step {
                        step_status = Some(st);
                    }
                }
            } else if sig > 0 {
                // From PID 1, -1 means every process of the namespace but itself.
                libc::kill(-1, sig);
            }
        }
        // Whatever the step left running ends with it.
        let mut leftovers: i32 = 0;
        libc::kill(-1, libc::SIGKILL);
        loop {
            let p = libc::waitpid(-1, std::ptr::null_mut(), 0);
            if p <= 0 {
                break;
            }
            leftovers += 1;
        }
        let mut msg = [0u8; 8];
        msg[..4].copy_from_slice(&step_status.unwrap_or(0).to_ne_bytes());
        msg[4..].copy_from_slice(&leftovers.to_ne_bytes());
        libc::write(status, msg.as_ptr().cast(), msg.len());
        libc::_exit(0);
    }
}

/// Writes the uid and gid maps of the init `pid` (launcher side; unprivileged launchers map
/// their own ids only, after denying setgroups as the kernel requires).
pub(crate) fn write_maps(pid: libc::pid_t, plan: &PidNsPlan) -> std::io::Result<()> {
    std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
    std::fs::write(format!("/proc/{pid}/uid_map"), plan.uid_map.as_bytes())?;
    std::fs::write(format!("/proc/{pid}/gid_map"), plan.gid_map.as_bytes())?;
    Ok(())
}
