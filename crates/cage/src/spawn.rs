//! Starting the step: fork, then in the child, in this order and with nothing allocated:
//! signals reset, `setsid`, working directory, rlimits, user switch, parent-death signal,
//! capabilities dropped, `no_new_privs`, Landlock, every descriptor above 2 marked close-on-exec,
//! the seccomp filter last (it may refuse calls the earlier steps need), then `execve`.
//!
//! The child reports a failure as `(stage, errno)` over a close-on-exec socket; a successful
//! exec closes it, so the launcher reads either a report or end-of-file.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use crate::error::CageError;
use crate::landlock;
use crate::plan::{ChildPlan, PreparedStep};
use crate::seccomp;
use crate::supervise::RunningStep;
use crate::sys;

/// The stages of the child, in order; the number travels in the failure report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Stage {
    Netns = 1,
    Hold,
    PidNs,
    Signals,
    Setsid,
    Chdir,
    Rlimit,
    User,
    ParentDeath,
    Capabilities,
    NoNewPrivs,
    Landlock,
    Descriptors,
    Seccomp,
    Exec,
}

impl Stage {
    fn from_u32(v: u32) -> Option<Stage> {
        use Stage::*;
        [
            Netns,
            Hold,
            PidNs,
            Signals,
            Setsid,
            Chdir,
            Rlimit,
            User,
            ParentDeath,
            Capabilities,
            NoNewPrivs,
            Landlock,
            Descriptors,
            Seccomp,
            Exec,
        ]
        .into_iter()
        .find(|s| *s as u32 == v)
    }

    fn describe(self) -> &'static str {
        match self {
            Stage::Netns => "creating the step's network namespace",
            Stage::Hold => "waiting for the launcher",
            Stage::PidNs => "giving the step its own PID namespace and /proc",
            Stage::Signals => "resetting signals",
            Stage::Setsid => "starting a new session (setsid)",
            Stage::Chdir => "entering the working directory",
            Stage::Rlimit => "setting resource limits",
            Stage::User => "switching user",
            Stage::ParentDeath => "binding the step's life to the launcher",
            Stage::Capabilities => "dropping capabilities",
            Stage::NoNewPrivs => "setting no_new_privs",
            Stage::Landlock => "enforcing the Landlock ruleset",
            Stage::Descriptors => "closing inherited descriptors",
            Stage::Seccomp => "installing the seccomp filter",
            Stage::Exec => "executing the command",
        }
    }
}

/// Signals the launcher handles itself (forwarding, reaping); blocked from before the fork so
/// none is lost, and unblocked in the child.
pub(crate) fn launcher_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGCHLD,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
        ] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Writes the failure report and exits. Async-signal-safe.
pub(crate) fn fail(sync: RawFd, stage: Stage, errno: i32) -> ! {
    let mut msg = [0u8; 8];
    msg[..4].copy_from_slice(&(stage as u32).to_ne_bytes());
    msg[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writing a stack buffer to our end of the socket, then exiting without running
    // any destructor of the parent's state.
    unsafe {
        libc::write(sync, msg.as_ptr().cast(), msg.len());
        libc::_exit(125);
    }
}

pub(crate) fn or_fail(ret: libc::c_long, sync: RawFd, stage: Stage) {
    if ret < 0 {
        fail(sync, stage, sys::errno());
    }
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_V3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability for good, in two halves around the user switch: the bounding set
/// and securebits first (that needs CAP_SETPCAP, which a uid change would take away), then the
/// remaining sets. A root launcher must succeed at each step; an unprivileged one holds no
/// capability, and `no_new_privs` (set next) keeps exec from granting any.
fn drop_bounding_set(sync: RawFd, privileged: bool) {
    // SAFETY: prctl with valid arguments; failures are handled below.
    unsafe {
        // Root stays root but its uid no longer implies capabilities, now or after exec.
        const SECBITS: libc::c_ulong = (libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)
            as libc::c_ulong;
        let r = libc::prctl(libc::PR_SET_SECUREBITS, SECBITS, 0, 0, 0);
        if r < 0 && privileged {
            fail(sync, Stage::Capabilities, sys::errno());
        }
        // Up to the kernel's last capability: EINVAL past it.
        for cap in 0..64 {
            let r = libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
            if r < 0 {
                if sys::errno() == libc::EINVAL {
                    break;
                }
                if privileged {
                    fail(sync, Stage::Capabilities, sys::errno());
                }
            }
        }
    }
}

/// Clears the ambient, effective, permitted and inheritable sets.
fn drop_capability_sets(sync: RawFd) {
    // SAFETY: prctl and capset with valid pointers to live structs.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = CapHeader {
            version: CAP_V3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        or_fail(
            libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()),
            sync,
            Stage::Capabilities,
        );
    }
}

/// The step between fork and exec. Only system calls on data prepared by the launcher.
/// `parent` is the pid its parent has as seen from the step (the launcher, or 1 for the init of
/// its own PID namespace); `in_pidns`: the init already set up namespaces and a fresh /proc.
///
/// # Safety
/// Must run in a freshly forked child of a single-threaded launcher (or of the init).
pub(crate) unsafe fn step_main(
    plan: &ChildPlan,
    sync: RawFd,
    parent: libc::pid_t,
    hold: bool,
    in_pidns: bool,
) -> ! {
    // SAFETY (whole body): raw system calls on valid, pre-built arguments.
    unsafe {
        if let Some(netns) = plan.netns.as_ref().filter(|_| !in_pidns) {
            match crate::netns::enter(netns) {
                Ok(listener) => {
                    let sent = crate::netns::send_fd(sync, listener);
                    // The step must never hold the relay's listener: it could accept on it.
                    libc::close(listener);
                    if !sent {
                        fail(sync, Stage::Netns, sys::errno());
                    }
                }
                Err(errno) => fail(sync, Stage::Netns, errno),
            }
        }
        if hold {
            let mut go = 0u8;
            if libc::read(sync, (&mut go as *mut u8).cast(), 1) != 1 {
                // The launcher gave up (or died): never run the step half-prepared.
                libc::_exit(125);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        or_fail(
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) as libc::c_long,
            sync,
            Stage::Signals,
        );
        // The Rust runtime ignores SIGPIPE; programs expect the default.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);

        or_fail(libc::setsid() as libc::c_long, sync, Stage::Setsid);
        or_fail(
            libc::chdir(plan.workdir.as_ptr()) as libc::c_long,
            sync,
            Stage::Chdir,
        );
        for (resource, limit) in &plan.rlimits {
            or_fail(
                libc::setrlimit(*resource, limit) as libc::c_long,
                sync,
                Stage::Rlimit,
            );
        }
        let privileged = libc::geteuid() == 0;
        drop_bounding_set(sync, privileged);
        if let Some((uid, gid)) = plan.user {
            or_fail(
                libc::setgroups(0, std::ptr::null()) as libc::c_long,
                sync,
                Stage::User,
            );
            or_fail(
                libc::setresgid(gid, gid, gid) as libc::c_long,
                sync,
                Stage::User,
            );
            or_fail(
                libc::setresuid(uid, uid, uid) as libc::c_long,
                sync,
                Stage::User,
            );
        }
        // Set after the uid change, which would clear it.
        or_fail(
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long,
            sync,
            Stage::ParentDeath,
        );
        if libc::getppid() != parent {
            libc::_exit(125);
        }
        drop_capability_sets(sync);
        or_fail(
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long,
            sync,
            Stage::NoNewPrivs,
        );
        if let Some(ruleset) = &plan.ruleset {
            if in_pidns {
                // The fresh /proc is a new mount the launcher's rules do not cover.
                let proc = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if proc < 0 {
                    fail(sync, Stage::Landlock, sys::errno());
                }
                let rule = crate::sys::landlock::PathBeneathAttr {
                    allowed_access: landlock::fs::READ_FILE | landlock::fs::READ_DIR,
                    parent_fd: proc,
                };
                if crate::sys::landlock::add_path_rule(ruleset.raw_fd(), &rule).is_err() {
                    fail(sync, Stage::Landlock, sys::errno());
                }
                libc::close(proc);
            }
            or_fail(
                landlock::restrict_self_raw(ruleset.raw_fd()),
                sync,
                Stage::Landlock,
            );
        }
        let r = libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if r < 0 {
            // Kernels before 5.11: mark them one by one.
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            let top = lim.rlim_cur.min(1 << 20) as RawFd;
            for fd in 3..top {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        if let Some(filter) = &plan.filter {
            or_fail(seccomp::install_raw(filter), sync, Stage::Seccomp);
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv_ptrs.as_ptr(),
            plan.envp_ptrs.as_ptr(),
        );
        fail(sync, Stage::Exec, sys::errno());
    }
}

fn exec_error(step: &PreparedStep, errno: i32) -> CageError {
    let program = &step.report.program;
    let e = io::Error::from_raw_os_error(errno);
    match errno {
        libc::ENOENT => CageError::NotFound(format!(
            "{program}: {e} (for a script, check that its interpreter exists inside the cage)"
        )),
        libc::EACCES | libc::EPERM => CageError::NotExecutable(format!(
            "{program}: execution refused ({e}); under the cage a program runs only from beneath the exec list, and so must a script's interpreter: add its directory with --exec DIR"
        )),
        _ => CageError::NotExecutable(format!("{program}: cannot execute: {e}")),
    }
}

/// What the `before_exec` hook gets: the step, forked but held before its cage is applied.
pub struct Started<'a> {
    pub pid: libc::pid_t,
    /// A pidfd for the step's main process (for the relay to watch).
    pub pidfd: BorrowedFd<'a>,
    /// In netns mode: the listener created inside the step's namespace, for the relay.
    pub listener: Option<OwnedFd>,
}

/// Called by the launcher after the fork and before the step may exec, for example to start
/// the relay.
pub type BeforeExec<'a> = &'a mut dyn FnMut(Started<'_>) -> Result<(), CageError>;

impl PreparedStep {
    /// Forks the step. With `before_exec`, the child waits until the hook returns, so a relay
    /// can be ready before the step's first instruction.
    ///
    /// This takes over the calling process's signal handling and child reaping: the launcher
    /// is dedicated to one step (as `nestbox run` is).
    pub fn spawn(
        mut self,
        mut before_exec: Option<BeforeExec<'_>>,
    ) -> Result<RunningStep, CageError> {
        self.child.seal();
        self.spawn_once(&mut before_exec).map_err(Spawn::into_error)
    }

    fn spawn_once(
        &mut self,
        before_exec: &mut Option<BeforeExec<'_>>,
    ) -> Result<RunningStep, Spawn> {
        let isolated = self.child.pid_ns.is_some();
        let hold = isolated
            || before_exec.is_some()
            || self.cgroup.is_some()
            || self.child.netns.is_some();
        let (ours, theirs) = socketpair()
            .map_err(|e| Spawn::Err(crate::error::setup("creating the launcher socket", e)))?;
        let (status_r, status_w) = if isolated {
            let (r, w) = pipe().map_err(Spawn::Err)?;
            (Some(r), Some(w))
        } else {
            (None, None)
        };

        let signals = launcher_signals();
        // SAFETY: blocking signals on the (single) launcher thread.
        unsafe { libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
        // SAFETY: trivial getter.
        let launcher = unsafe { libc::getpid() };
        let started = Instant::now();
        let pid = match &self.child.pid_ns {
            // SAFETY: the launcher is single-threaded here; the child only makes raw system
            // calls on prepared data (init_main), then execs or exits.
            Some(ns) => unsafe {
                crate::init::raw_clone(
                    ns.clone_flags(self.child.netns.is_some() || self.child.empty_netns),
                ) as libc::pid_t
            },
            // SAFETY: as above, with step_main.
            None => unsafe { libc::fork() },
        };
        if pid < 0 {
            let e = io::Error::last_os_error();
            return Err(if isolated {
                Spawn::NoPidNs(format!("clone: {e}"))
            } else {
                Spawn::Err(crate::error::setup("fork", e))
            });
        }
        if pid == 0 {
            drop(ours);
            // SAFETY: we are the freshly created child.
            unsafe {
                match &status_w {
                    Some(w) => {
                        crate::init::init_main(&self.child, theirs.as_raw_fd(), w.as_raw_fd())
                    }
                    None => step_main(&self.child, theirs.as_raw_fd(), launcher, hold, false),
                }
            }
        }
        drop(theirs);
        drop(status_w);
        let kill = |err: Spawn| -> Spawn {
            // SAFETY: our own child; kill then reap so nothing is left behind.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            err
        };
        let pidfd = match sys::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => return Err(kill(Spawn::Err(crate::error::setup("pidfd_open", e)))),
        };
        if let Some(ns) = &self.child.pid_ns {
            if ns.with_userns
                && let Err(e) = crate::init::write_maps(pid, ns)
            {
                return Err(kill(Spawn::NoPidNs(format!("writing the uid map: {e}"))));
            }
            // SAFETY: one byte to the init: "mapped".
            unsafe { libc::write(ours.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
        let mut listener = None;
        if self.child.netns.is_some() {
            match crate::netns::recv_fd(ours.as_raw_fd()) {
                Ok((Some(fd), _)) => listener = Some(fd),
                Ok((None, report)) => {
                    // SAFETY: reap the failed child.
                    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                    return Err(self.child_failure(&report));
                }
                Err(e) => {
                    return Err(kill(Spawn::Err(crate::error::setup(
                        "receiving the relay listener",
                        e,
                    ))));
                }
            }
        }
        if let Some(cg) = &self.cgroup
            && let Err(e) = cg.add(pid)
        {
            return Err(kill(Spawn::Err(crate::error::setup(
                &format!("moving the step into {}", cg.path().display()),
                e,
            ))));
        }
        if let Some(hook) = before_exec.as_mut()
            && let Err(e) = hook(Started {
                pid,
                pidfd: pidfd.as_fd(),
                listener: listener.take(),
            })
        {
            return Err(kill(Spawn::Err(e)));
        }
        // Orphans of the step come to us from here on, so they can be found and killed.
        // SAFETY: plain prctl.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if hold {
            // SAFETY: one byte to the child: "go".
            unsafe { libc::write(ours.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
        let mut report = [0u8; 8];
        // SAFETY: reading into a stack buffer.
        let n = unsafe { libc::read(ours.as_raw_fd(), report.as_mut_ptr().cast(), report.len()) };
        if n == 8 {
            // SAFETY: reap the failed child (the init exits once its step has).
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            return Err(self.child_failure(&report));
        }
        Ok(RunningStep::new(self, pid, pidfd, started, status_r))
    }

    /// Turns the child's `(stage, errno)` report into the error the user sees.
    fn child_failure(&self, report: &[u8]) -> Spawn {
        if report.len() != 8 {
            return Spawn::Err(CageError::Setup(
                "the step exited before its cage was set up".into(),
            ));
        }
        let stage = u32::from_ne_bytes(report[..4].try_into().unwrap());
        let errno = i32::from_ne_bytes(report[4..].try_into().unwrap());
        Spawn::Err(match Stage::from_u32(stage) {
            Some(Stage::Exec) => exec_error(self, errno),
            Some(Stage::PidNs) => {
                return Spawn::NoPidNs(format!(
                    "mounting a fresh /proc: {}",
                    io::Error::from_raw_os_error(errno)
                ));
            }
            Some(s) => CageError::Setup(format!(
                "the cage could not be set up while {}: {}",
                s.describe(),
                io::Error::from_raw_os_error(errno)
            )),
            None => CageError::Setup(format!("the step failed at an unknown stage {stage}")),
        })
    }
}

/// Why one attempt to start the step failed: for good, or only because the PID namespace is
/// unavailable (then the step starts without it).
enum Spawn {
    Err(CageError),
    NoPidNs(String),
}

impl Spawn {
    fn into_error(self) -> CageError {
        match self {
            Spawn::Err(e) => e,
            Spawn::NoPidNs(why) => CageError::NamespacesUnavailable(format!(
                "the step's own PID, mount and network namespaces cannot be created here ({why})"
            )),
        }
    }
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair fills two descriptors.
    sys::check_int(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), CageError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors.
    sys::check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })
        .map_err(|e| crate::error::setup("pipe", e))?;
    // SAFETY: fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl ChildPlan {
    /// Builds the NULL-terminated pointer arrays execve needs; done once, before the fork.
    fn seal(&mut self) {
        self.argv_ptrs = self
            .argv
            .iter()
            .map(|c| c.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        self.envp_ptrs = self
            .envp
            .iter()
            .map(|c| c.as_ptr())
            .chain([std::ptr::null()])
            .collect();
    }
}
