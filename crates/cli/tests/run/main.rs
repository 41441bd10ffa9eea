//! `nestbox run`, `probe` and `policy check` as a user meets them: exit statuses, errors that
//! say what and why, the private temp dir, the report, stdin passthrough.

#[path = "../common/mod.rs"]
mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(30);

fn run(s: &Scratch, extra: &[&str], cmd: &[&str]) -> std::process::Output {
    output_within(&mut s.nestbox(extra, cmd), T)
}

#[test]
fn the_steps_exit_status_passes_through() {
    let s = Scratch::new();
    assert_eq!(
        run(&s, &[], &["/bin/sh", "-c", "exit 7"]).status.code(),
        Some(7)
    );
    assert_eq!(run(&s, &[], &["/bin/true"]).status.code(), Some(0));
}

#[test]
fn a_step_killed_by_a_signal_exits_128_plus_the_signal() {
    let s = Scratch::new();
    let out = run(&s, &[], &["/bin/sh", "-c", "kill -KILL $$"]);
    assert_eq!(out.status.code(), Some(128 + 9));
}

#[test]
fn an_unknown_command_exits_127_and_says_where_it_looked() {
    let s = Scratch::new();
    let out = run(&s, &[], &["no-such-tool-anywhere"]);
    assert_eq!(out.status.code(), Some(127));
    let err = stderr(&out);
    assert!(
        err.starts_with("nestbox: no-such-tool-anywhere: command not found"),
        "{err}"
    );
    assert!(err.contains("--exec"), "{err}");
}

#[test]
fn output_and_stdin_pass_through() {
    let s = Scratch::new();
    let mut child = s
        .nestbox(
            &[],
            &[
                "/bin/sh",
                "-c",
                "read line; echo \"out:$line\"; echo err:x >&2",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "out:hello\n");
    assert_eq!(stderr(&out), "err:x\n");
}

#[test]
fn home_and_tmpdir_are_private_and_removed_afterwards() {
    let s = Scratch::new();
    let out = run(
        &s,
        &[],
        &[
            "/bin/sh",
            "-c",
            "echo $HOME; echo $TMPDIR; touch $HOME/h $TMPDIR/t && echo wrote",
        ],
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}\n{}", stderr(&out));
    assert!(
        lines[0].contains("/nestbox-") && lines[0].ends_with("/home"),
        "{text}"
    );
    assert!(
        lines[1].contains("/nestbox-") && lines[1].ends_with("/tmp"),
        "{text}"
    );
    assert_eq!(lines[2], "wrote");
    let root = std::path::Path::new(lines[0]).parent().unwrap();
    assert!(
        !root.exists(),
        "the step dir must be removed: {}",
        root.display()
    );
}

#[test]
fn keep_tmp_keeps_the_step_dir() {
    let s = Scratch::new();
    let out = run(
        &s,
        &["--keep-tmp"],
        &["/bin/sh", "-c", "touch $TMPDIR/kept; echo $TMPDIR"],
    );
    let tmp = std::path::PathBuf::from(stdout(&out).trim());
    assert!(tmp.join("kept").exists());
    std::fs::remove_dir_all(tmp.parent().unwrap()).unwrap();
}

#[test]
fn the_report_says_what_was_enforced_and_how_it_ended() {
    let s = Scratch::new();
    let report = s.path().join("r.json");
    let out = run(
        &s,
        &["--report", report.to_str().unwrap(), "--env", "X=1"],
        &["/bin/sh", "-c", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(3));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["landlock"]["enforced"], true);
    assert!(r["landlock"]["kernel_abi"].as_u64().unwrap() >= 6);
    // No network: its own namespace holding only lo, or (without one) no TCP port at all.
    let notes = r["network"]["notes"].to_string();
    assert!(
        (r["landlock"]["tcp_connect"].is_null() && notes.contains("own network namespace"))
            || r["landlock"]["tcp_connect"] == serde_json::json!([]),
        "{notes}"
    );
    assert_eq!(r["seccomp"]["enforced"], true);
    assert_eq!(r["network"]["mode"], "none");
    assert_eq!(r["no_new_privs"], true);
    assert_eq!(r["outcome"]["exit_code"], 3);
    assert_eq!(r["outcome"]["status"], 3);
    assert!(r["dropped"].as_array().unwrap().is_empty());
    let env: Vec<&str> = r["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"X") && !env.iter().any(|e| e.contains('=')),
        "names only: {env:?}"
    );
    let rules = r["landlock"]["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["path"] == "/usr" && r["access"] == "exec")
    );
    assert!(!rules.iter().any(|r| r["path"] == "/etc"));
}

#[test]
fn report_to_stderr_with_a_dash() {
    let s = Scratch::new();
    let out = run(&s, &["--report", "-"], &["/bin/true"]);
    let err = stderr(&out);
    let json_start = err.find('{').expect("json on stderr");
    let r: serde_json::Value = serde_json::from_str(&err[json_start..]).unwrap();
    assert_eq!(r["outcome"]["status"], 0);
}

#[test]
fn a_malformed_policy_is_refused_with_file_line_and_column() {
    let s = Scratch::new();
    let p = s.path().join("bad.toml");
    std::fs::write(&p, "[fs]\nread = [\"/usr\"]\nwrtie = [\".\"]\n").unwrap();
    let out = run(&s, &["--policy", p.to_str().unwrap()], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(
        err.contains("bad.toml:3:1:") && err.contains("wrtie"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn a_missing_path_is_refused_unless_optional() {
    let s = Scratch::new();
    let p = s.path().join("p.toml");
    std::fs::write(&p, "[fs]\nread = [\"/no/such/dir\"]\n").unwrap();
    let out = run(&s, &["--policy", p.to_str().unwrap()], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(
        err.contains("p.toml:2:9:")
            && err.contains("does not exist")
            && err.contains("`?/no/such/dir`"),
        "{err}"
    );
    std::fs::write(&p, "[fs]\nread = [\"?/no/such/dir\"]\n").unwrap();
    assert_eq!(
        run(&s, &["--policy", p.to_str().unwrap()], &["/bin/true"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn bad_flags_are_refused_precisely() {
    let s = Scratch::new();
    let out = run(&s, &["--timeout", "30"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("--timeout: invalid duration `30`: a unit is required"),
        "{}",
        stderr(&out)
    );
    let out = run(&s, &["--env", "1X=y"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    let out = run(&s, &["--read", "relative/missing"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("flag --read"), "{}", stderr(&out));
}

#[test]
fn a_missing_command_is_a_usage_error() {
    let out = output_within(Command::new(nestbox_bin()).arg("run"), T);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("CMD"), "{}", stderr(&out));
}

#[test]
fn user_needs_a_root_launcher() {
    if is_root() {
        return; // covered from the other side by capabilities::user_flag_runs_the_step_as_another_user
    }
    let s = Scratch::new();
    let out = run(&s, &["--user", "65534"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn policy_check_accepts_a_good_file_and_refuses_a_bad_one() {
    let s = Scratch::new();
    let good = s.path().join("good.toml");
    std::fs::write(&good, "[fs]\nread = [\"/etc/hostname\", \"?/opt/none\"]\nwrite = [\".\"]\n[limits]\ntimeout = \"30m\"\n").unwrap();
    let out = output_within(
        Command::new(nestbox_bin())
            .args(["policy", "check"])
            .arg(&good)
            .current_dir(s.path()),
        T,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("ok"));
    let bad = s.path().join("bad.toml");
    std::fs::write(&bad, "[limits]\ntimeout = \"soon\"\n").unwrap();
    let out = output_within(
        Command::new(nestbox_bin())
            .args(["policy", "check"])
            .arg(&bad),
        T,
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("bad.toml:2:11: limits.timeout"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn probe_reports_the_kernel_as_json() {
    let out = output_within(Command::new(nestbox_bin()).args(["probe", "--json"]), T);
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(p["landlock"]["abi"].as_u64().is_some());
    assert!(p["run_will"]["cage"] == "full" || p["run_will"]["cage"] == "refuse");
    let text = output_within(Command::new(nestbox_bin()).arg("probe"), T);
    assert!(stdout(&text).contains("nestbox run will"));
}

#[test]
fn common_tools_work_in_the_default_cage() {
    let s = Scratch::new();
    std::fs::write(s.path().join("t.py"), "import json, ssl, sqlite3, subprocess\nprint(json.dumps({'ok': subprocess.run(['true']).returncode}))\n").unwrap();
    let out = run(&s, &[], &[PYTHON, "t.py"]);
    assert_eq!(stdout(&out).trim(), "{\"ok\": 0}", "{}", stderr(&out));
    assert!(!stderr(&out).contains("Error"), "{}", stderr(&out));
    let out = run(
        &s,
        &[],
        &[
            "/bin/sh",
            "-c",
            "git --version && ls /usr >/dev/null && date >/dev/null && echo fine",
        ],
    );
    assert!(stdout(&out).contains("fine"), "{}", stderr(&out));
    // Builds run what they compile: the working directory is executable.
    let out = run(
        &s,
        &[],
        &[
            "/bin/sh",
            "-c",
            "cp /bin/true ./built && ./built && echo ran",
        ],
    );
    assert_eq!(stdout(&out).trim(), "ran", "{}", stderr(&out));
}

#[test]
fn the_report_is_never_written_through_a_symlink_or_into_a_fifo() {
    let s = Scratch::new();
    let victim = s.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    // The repository the step runs ships `report.json -> victim`.
    let planted = s.path().join("report.json");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let out = run(&s, &["--report", planted.to_str().unwrap()], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");

    let fifo = s.path().join("fifo.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a fresh path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = run(&s, &["--report", fifo.to_str().unwrap()], &["/bin/true"]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "refused at once, never blocked"
    );
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
}
