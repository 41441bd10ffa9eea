//! `nestbox exec` behind the gate: the same guard, modes and JSON refusals as the MCP server.

use std::process::Command;
use std::time::Duration;

use crate::*;

fn exec(work: &std::path::Path, args: &[&str]) -> std::process::Output {
    output_within(
        Command::new(nestbox())
            .args(["exec", "--backend", "local"])
            .args(args)
            .current_dir(work)
            .env("XDG_DATA_HOME", work.join("data")),
        Duration::from_secs(60),
    )
}

#[test]
fn exec_refuses_what_needs_approval_when_nobody_can_answer() {
    let w = tempfile::tempdir().unwrap();
    // Standard input is not a terminal here, so the default mode (auto) is deny.
    let out = exec(w.path(), &["--", "sh", "-c", "touch ran; git reset --hard"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("git.reset_hard"), "{err}");
    assert!(!w.path().join("ran").exists());
}

#[test]
fn exec_with_approve_runs_approvable_commands_but_never_hardline_ones() {
    let w = tempfile::tempdir().unwrap();
    let out = exec(
        w.path(),
        &[
            "--approval",
            "approve",
            "--",
            "sh",
            "-c",
            "echo approved; git clean -n -f",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("approved"));
    let out = exec(
        w.path(),
        &[
            "--approval",
            "approve",
            "--",
            "sh",
            "-c",
            "rm -rf / ; echo ran",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rm.recursive_root"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
}

#[test]
fn exec_prints_a_refusal_as_json_with_json() {
    let w = tempfile::tempdir().unwrap();
    let out = exec(
        w.path(),
        &["--json", "--", "git", "push", "--force", "origin", "main"],
    );
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["refused"]["cause"]["kind"], "needs_approval");
    assert_eq!(v["refused"]["findings"][0]["id"], "git.force_push");
}

#[test]
fn an_unknown_approval_mode_is_an_error_not_a_default() {
    let w = tempfile::tempdir().unwrap();
    let out = exec(w.path(), &["--approval", "yolo", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an approval mode"));
}
