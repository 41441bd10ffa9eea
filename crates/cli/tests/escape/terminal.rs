//! Typing into the caller's terminal with TIOCSTI (CVE-2017-5226). The step runs in its own
//! session, and the filter refuses TIOCSTI and TIOCLINUX outright.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use crate::common::*;

/// Opens a pseudo-terminal pair; returns the replica side.
fn pty_replica() -> OwnedFd {
    // SAFETY: standard pty setup; every return value is checked.
    unsafe {
        let primary = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(primary >= 0);
        assert_eq!(libc::grantpt(primary), 0);
        assert_eq!(libc::unlockpt(primary), 0);
        let name = libc::ptsname(primary);
        assert!(!name.is_null());
        let replica = libc::open(name, libc::O_RDWR | libc::O_NOCTTY);
        assert!(replica >= 0);
        // Leak the primary on purpose: the replica must stay usable for the test's duration.
        OwnedFd::from_raw_fd(replica)
    }
}

fn probe_with_tty(mut cmd: Command) -> String {
    let tty = pty_replica();
    cmd.stdin(Stdio::from(tty));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn step_cannot_inject_keystrokes_with_tiocsti() {
    let s = Scratch::new();
    let mut inside = Command::new(nestbox_bin());
    inside
        .args(["run", "--workdir"])
        .arg(s.path())
        .args(["--", PYTHON, "probe.py", "tiocsti", "0"]);
    assert_eq!(probe_with_tty(inside), "ERR EPERM");
    if is_root() {
        // Control: root may push input into any terminal (CAP_SYS_ADMIN).
        let mut outside = Command::new(PYTHON);
        outside
            .arg(s.path().join("probe.py"))
            .args(["tiocsti", "0"]);
        assert_eq!(probe_with_tty(outside), "OK");
    }
}
