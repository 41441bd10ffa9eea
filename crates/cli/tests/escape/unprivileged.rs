//! The cage needs no root. CI runs as root, so these tests start nestbox itself as `nobody`
//! (through setpriv, with no capabilities and no groups) and attack files and processes that
//! `nobody` owns: the control shows nobody can reach them outside the cage, so a refusal inside
//! comes from the cage and not from ordinary permissions.

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

const NOBODY: u32 = 65534;

/// A copy of the nestbox binary that `nobody` can execute (the build tree may be private).
fn public_nestbox() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("nestbox-bin-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("nestbox");
    std::fs::copy(nestbox_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

/// `cmd` as nobody (when the test runs as root), else as the current unprivileged user.
fn as_nobody(program: &std::path::Path, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]);
        c.arg(program).args(args);
        c.env("HOME", "/nonexistent");
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

fn probe(program: &std::path::Path, pre: &[&str], s: &Scratch, args: &[&str]) -> String {
    let mut all: Vec<&str> = pre.to_vec();
    all.extend_from_slice(args);
    let mut cmd = as_nobody(program, &all);
    cmd.current_dir(s.path());
    let out = output_within(&mut cmd, Duration::from_secs(60));
    let line = stdout(&out).trim().to_string();
    assert!(
        line == "OK" || line.starts_with("ERR"),
        "no answer: {}\n{}",
        line,
        stderr(&out)
    );
    line
}

#[test]
fn unprivileged_nestbox_cages_file_network_socket_and_signal_attacks() {
    let s = Scratch::new();
    let (_bin_dir, bin) = public_nestbox();
    let ws = s.path().to_str().unwrap().to_string();
    let inside = ["run", "--workdir", &ws, "--", PYTHON, "probe.py"];
    let outside = [PYTHON, "probe.py"];
    let python = PathBuf::from(PYTHON);

    // A file nobody owns, outside the cage's lists.
    let private = tempfile::Builder::new()
        .prefix("nestbox-nobody-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = private.path().join("secret");
    std::fs::write(&secret, "nobody's secret").unwrap();
    if is_root() {
        chown(private.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        chown(&secret, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let secret = secret.to_str().unwrap();
    let planted = private.path().join("planted");
    let planted = planted.to_str().unwrap();

    assert_eq!(probe(&bin, &inside, &s, &["read", secret]), "ERR EACCES");
    assert_eq!(probe(&python, &outside[1..], &s, &["read", secret]), "OK");
    assert_eq!(probe(&bin, &inside, &s, &["write", planted]), "ERR EACCES");
    assert_eq!(probe(&python, &outside[1..], &s, &["write", planted]), "OK");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let answer = probe(&bin, &inside, &s, &["tcp", "127.0.0.1", &port]);
    // Its own network namespace (ECONNREFUSED), or Landlock where there is none (EACCES).
    assert!(
        answer == "ERR ECONNREFUSED" || answer == "ERR EACCES",
        "{answer}"
    );
    assert_eq!(
        probe(&python, &outside[1..], &s, &["tcp", "127.0.0.1", &port]),
        "OK"
    );

    let sock = s.path().join("api.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = sock.to_str().unwrap();
    assert_eq!(probe(&bin, &inside, &s, &["unix", sock]), "ERR EPERM");
    assert_eq!(probe(&python, &outside[1..], &s, &["unix", sock]), "OK");

    // A process of the same (unprivileged) user outside the cage: unreachable (in its own PID
    // namespace the step cannot even name it), and it survives.
    let mut victim = as_nobody(std::path::Path::new("/bin/sleep"), &["300"])
        .spawn()
        .unwrap();
    let pid = victim.id().to_string();
    let answer = probe(&bin, &inside, &s, &["kill", &pid, "15"]);
    assert!(answer == "ERR ESRCH" || answer == "ERR EPERM", "{answer}");
    assert!(victim.try_wait().unwrap().is_none(), "victim must survive");
    assert_eq!(
        probe(&python, &outside[1..], &s, &["kill", &pid, "0"]),
        "OK"
    );
    let environ = format!("/proc/{pid}/environ");
    let answer = probe(&bin, &inside, &s, &["read", &environ]);
    assert!(answer == "ERR ENOENT" || answer == "ERR EACCES", "{answer}");
    assert_eq!(probe(&python, &outside[1..], &s, &["read", &environ]), "OK");
    victim.kill().unwrap();
    victim.wait().unwrap();
    // PID 1 is always visible and never in the step's Landlock domain (the namespace's init, or
    // the machine's): signalling, tracing or reading it is refused by the cage itself.
    assert_eq!(probe(&bin, &inside, &s, &["kill", "1", "15"]), "ERR EPERM");
    assert_eq!(probe(&bin, &inside, &s, &["ptrace", "1"]), "ERR EPERM");
    assert_eq!(
        probe(&bin, &inside, &s, &["read", "/proc/1/environ"]),
        "ERR EACCES"
    );

    assert_eq!(probe(&bin, &inside, &s, &["io_uring"]), "ERR EPERM");
    assert_eq!(probe(&bin, &inside, &s, &["unshare-user"]), "ERR EPERM");
    assert_eq!(probe(&python, &outside[1..], &s, &["unshare-user"]), "OK");
}
