//! Watching a running step: forwarding Ctrl-C and SIGTERM to its whole tree, enforcing the
//! timeout, and making sure nothing the step started outlives it.
//!
//! The step ends when its main process ends. Whatever it left running (background jobs,
//! daemons that called `setsid`) is killed then: the launcher is a child subreaper, so every
//! orphan of the step is its descendant and can be found.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::cgroup::PidsCgroup;
use crate::plan::PreparedStep;
use crate::report::{OutcomeReport, Report};
use crate::spawn::launcher_signals;
use crate::stepdir::StepDir;
use crate::tree;

/// How long a timed-out step gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// The exit status used when the step timed out (as coreutils `timeout` does).
pub const TIMEOUT_STATUS: i32 = 124;

/// How a step ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The main process's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the main process, when one did.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration: Duration,
    /// Processes left running by the step and killed when it ended.
    pub leftovers_killed: usize,
}

impl Outcome {
    /// The status to exit with: the step's own, 128+N for a signal, 124 for a timeout.
    pub fn status(&self) -> i32 {
        if self.timed_out {
            TIMEOUT_STATUS
        } else if let Some(s) = self.signal {
            128 + s
        } else {
            self.exit_code.unwrap_or(125)
        }
    }
}

/// A step that is running. [`RunningStep::wait`] supervises it to the end.
pub struct RunningStep {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    started: Instant,
    timeout: Option<Duration>,
    report: Report,
    cgroup: Option<PidsCgroup>,
    /// With a PID namespace: `pid` is its init, and this pipe brings the step's own status.
    init_status: Option<OwnedFd>,
    _dir: StepDir,
}

impl RunningStep {
    pub(crate) fn new(
        step: &mut PreparedStep,
        pid: libc::pid_t,
        pidfd: OwnedFd,
        started: Instant,
        init_status: Option<OwnedFd>,
    ) -> Self {
        RunningStep {
            pid,
            pidfd,
            started,
            timeout: step.timeout,
            report: step.report.clone(),
            cgroup: step.cgroup.take(),
            init_status,
            _dir: step.dir.take().expect("a prepared step has its directory"),
        }
    }

    /// The step's main process id.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// A pidfd for the step's main process (stays valid after it exits).
    pub fn pidfd(&self) -> &OwnedFd {
        &self.pidfd
    }

    /// The report of what is enforced (without the outcome yet).
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Waits for the step, forwarding signals and enforcing the timeout; then kills whatever it
    /// left behind and removes its private directory (unless kept). Returns the outcome and the
    /// report completed with it.
    pub fn wait(self) -> (Outcome, Report) {
        let signals = launcher_signals();
        let deadline = self.timeout.map(|t| self.started + t);
        let mut kill_at: Option<Instant> = None;
        let mut timed_out = false;
        let mut status: Option<libc::c_int> = None;
        let mut interrupts = 0;
        while status.is_none() {
            let wake = match (kill_at, deadline) {
                (Some(k), _) => Some(k),
                (None, Some(d)) if !timed_out => Some(d),
                _ => None,
            };
            let sig = wait_signal(&signals, wake);
            match sig {
                Some(libc::SIGCHLD) | None => {}
                Some(s) => {
                    interrupts += 1;
                    // Third interrupt: the user means it.
                    let forward = if interrupts >= 3 { libc::SIGKILL } else { s };
                    self.signal_step(forward);
                }
            }
            tree::reap(self.pid, &mut status);
            if status.is_some() {
                break;
            }
            let now = Instant::now();
            if let Some(k) = kill_at
                && now >= k
            {
                self.signal_step(libc::SIGKILL);
                kill_at = None;
            } else if let Some(d) = deadline
                && !timed_out
                && now >= d
            {
                timed_out = true;
                self.signal_step(libc::SIGTERM);
                kill_at = Some(now + KILL_GRACE);
            }
        }
        let duration = self.started.elapsed();
        let mut leftovers_killed = 0;
        if let Some(pipe) = &self.init_status {
            // The init reports the step's own status and what it killed; an init killed
            // outright (timeout) took the namespace along and reports nothing.
            let mut msg = [0u8; 8];
            // SAFETY: reading into a stack buffer; the write end closed with the init.
            let n = unsafe { libc::read(pipe.as_raw_fd(), msg.as_mut_ptr().cast(), msg.len()) };
            if n == 8 {
                status = Some(i32::from_ne_bytes(msg[..4].try_into().unwrap()));
                leftovers_killed = i32::from_ne_bytes(msg[4..].try_into().unwrap()) as usize;
            }
        }
        if tree::has_children() {
            leftovers_killed += tree::kill_all_descendants();
        }
        if let Some(cg) = &self.cgroup {
            leftovers_killed += cg.kill_all();
        }
        let status = status.unwrap_or(0);
        let outcome = Outcome {
            exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
            timed_out,
            duration,
            leftovers_killed,
        };
        let mut report = self.report;
        report.outcome = Some(OutcomeReport {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            timed_out,
            duration_ms: duration.as_millis(),
            leftover_processes_killed: leftovers_killed,
            status: outcome.status(),
        });
        (outcome, report)
    }
}

impl RunningStep {
    /// Sends `signal` to every process of the step: through its init when it has its own PID
    /// namespace (the init forwards, and SIGKILL to the init ends the whole namespace),
    /// otherwise to every descendant of the launcher.
    fn signal_step(&self, signal: libc::c_int) {
        if self.init_status.is_some() {
            // SAFETY: the pidfd names our init even if its pid were reused.
            let _ = crate::sys::pidfd_send_signal(self.pidfd.as_raw_fd(), signal);
        } else {
            tree::signal_descendants(signal);
        }
    }
}

/// Waits for one of the launcher's signals, or until `until`. Returns the signal, or `None` on
/// timeout.
fn wait_signal(set: &libc::sigset_t, until: Option<Instant>) -> Option<libc::c_int> {
    // SAFETY: siginfo_t is plain data; sigwaitinfo/sigtimedwait fill it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = match until {
        None => unsafe { libc::sigwaitinfo(set, &mut info) },
        Some(t) => {
            let left = t.saturating_duration_since(Instant::now());
            let ts = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: valid pointers to set, info and ts.
            unsafe { libc::sigtimedwait(set, &mut info, &ts) }
        }
    };
    (r > 0).then_some(r)
}
