//! Descriptors inherited from the caller: neither Landlock nor seccomp re-checks an open file,
//! so every descriptor above 2 is closed before the step's program starts.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::common::*;

fn with_inherited_fd(mut cmd: Command, file: &std::fs::File) -> String {
    let fd = file.as_raw_fd();
    // SAFETY: dup2 in the child before exec; fd 5 becomes an inheritable copy.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself keeps close-on-exec, so clear it explicitly.
            if libc::dup2(fd, 5) < 0 || libc::fcntl(5, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }

            Ok(())
        });
    }
    let out = output_within(&mut cmd, std::time::Duration::from_secs(30));
    stdout(&out).trim().to_string()
}

#[test]
fn step_does_not_inherit_open_descriptors() {
    let s = Scratch::new();
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "inherited secret").unwrap();
    let file = std::fs::File::open(secret.path()).unwrap();

    let mut inside = Command::new(nestbox_bin());
    inside
        .args(["run", "--workdir"])
        .arg(s.path())
        .args(["--", PYTHON, "probe.py", "fd", "5"]);
    assert_eq!(with_inherited_fd(inside, &file), "ERR EBADF");

    let mut outside = Command::new(PYTHON);
    outside.arg(s.path().join("probe.py")).args(["fd", "5"]);
    assert_eq!(with_inherited_fd(outside, &file), "OK");
}
