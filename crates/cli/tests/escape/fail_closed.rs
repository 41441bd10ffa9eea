//! Fail closed: when the kernel cannot give what the policy relies on, nestbox refuses (125)
//! unless `--best-effort`, and then reports what was dropped. The old kernel is simulated
//! honestly: a seccomp filter installed around nestbox makes the Landlock system calls answer
//! ENOSYS, exactly as a kernel without Landlock does.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

const WITHOUT_LANDLOCK: &str = r#"
import ctypes, os, struct, sys
# BPF: if nr in (444, 445, 446) return ERRNO(ENOSYS) else ALLOW (x86_64 only; arch checked).
ins = [
    (0x20, 0, 0, 4), (0x15, 1, 0, 0xC000003E), (0x06, 0, 0, 0x7fff0000),
    (0x20, 0, 0, 0),
    (0x15, 2, 0, 444), (0x15, 1, 0, 445), (0x15, 0, 1, 446),
    (0x06, 0, 0, 0x00050000 | 38),
    (0x06, 0, 0, 0x7fff0000),
]
prog = b"".join(struct.pack("HBBI", *i) for i in ins)
buf = ctypes.create_string_buffer(prog)
fprog = struct.pack("HxxxxxxP", len(ins), ctypes.addressof(buf))
fbuf = ctypes.create_string_buffer(fprog)
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_ulong
assert libc.prctl(38, L(1), L(0), L(0), L(0)) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, L(2), L(ctypes.addressof(fbuf)), L(0), L(0)) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
os.execv(sys.argv[1], sys.argv[1:])
"#;

fn without_landlock(args: &[&str]) -> Command {
    let mut c = Command::new(PYTHON);
    c.arg("-c")
        .arg(WITHOUT_LANDLOCK)
        .arg(nestbox_bin())
        .args(args);
    c
}

#[test]
#[cfg(target_arch = "x86_64")]
fn nestbox_refuses_to_run_without_landlock() {
    let s = Scratch::new();
    let ws = s.path().to_str().unwrap();
    let marker = s.path().join("ran");
    let out = output_within(
        &mut without_landlock(&["run", "--workdir", ws, "--", "/usr/bin/touch", "ran"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("Landlock is unavailable") && err.contains("ENOSYS"),
        "{err}"
    );
    assert!(
        err.contains("--best-effort"),
        "the refusal says how to run anyway: {err}"
    );
    assert!(!marker.exists(), "the step must not have run");

    // The probe agrees.
    let probe = output_within(
        &mut without_landlock(&["probe", "--json"]),
        Duration::from_secs(30),
    );
    let json: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    assert_eq!(json["landlock"]["available"], false);
    assert_eq!(json["run_will"]["cage"], "refuse");
}

#[test]
#[cfg(target_arch = "x86_64")]
fn best_effort_runs_and_reports_exactly_what_was_dropped() {
    let s = Scratch::new();
    let ws = s.path().to_str().unwrap();
    let report = s.path().join("report.json");
    let out = output_within(
        &mut without_landlock(&[
            "run",
            "--workdir",
            ws,
            "--best-effort",
            "--report",
            report.to_str().unwrap(),
            "--",
            PYTHON,
            "probe.py",
            "unix",
            "/nonexistent.sock",
        ]),
        Duration::from_secs(30),
    );
    assert!(
        stderr(&out).contains("best effort: NOT enforced"),
        "{}",
        stderr(&out)
    );
    // The seccomp filter still stands: unix sockets are refused.
    assert_eq!(stdout(&out).trim(), "ERR EPERM");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(report["landlock"]["enforced"], false);
    assert_eq!(report["seccomp"]["enforced"], true);
    let dropped = report["dropped"].as_array().unwrap();
    assert!(
        dropped
            .iter()
            .any(|d| d.as_str().unwrap().contains("filesystem rules")),
        "{dropped:?}"
    );
    assert!(
        dropped
            .iter()
            .any(|d| d.as_str().unwrap().contains("TCP port rules")),
        "{dropped:?}"
    );
}

#[test]
fn where_its_namespaces_cannot_be_created_nestbox_refuses_unless_best_effort() {
    // nestbox inside nestbox: the outer cage's filter refuses new namespaces, as a locked-down
    // container would. The inner nestbox runs as nobody so the outer workdir is all it needs.
    let s = Scratch::new();
    let inner = s.path().join("nestbox");
    std::fs::copy(nestbox_bin(), &inner).unwrap();
    let inner = inner.to_str().unwrap();
    let user = if is_root() {
        vec!["--user", "65534"]
    } else {
        vec![]
    };
    let run_inner = |extra: &[&str]| {
        let args: Vec<&str> = user.clone();
        let mut cmd_args = vec![inner, "run"];
        cmd_args.extend_from_slice(extra);
        cmd_args.extend_from_slice(&["--", "/bin/sh", "-c", "echo ran"]);
        output_within(&mut s.nestbox(&args, &cmd_args), Duration::from_secs(60))
    };
    let out = run_inner(&[]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("namespaces cannot be created here") && err.contains("--best-effort"),
        "{err}"
    );
    assert!(!stdout(&out).contains("ran"));

    let out = run_inner(&["--best-effort"]);
    assert_eq!(stdout(&out).trim(), "ran", "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("best effort") && err.contains("shared PID namespace"),
        "{err}"
    );
}
