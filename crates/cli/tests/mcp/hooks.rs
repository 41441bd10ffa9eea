//! The worked example hook (examples/hooks/guard-push.py) in front of `nestbox mcp` and
//! `nestbox exec`: it sees every call, its deny reaches the agent, its log has each call.

use std::process::Command;
use std::time::Duration;

use crate::*;

fn example_hook() -> String {
    repo_root()
        .join("examples/hooks/guard-push.py")
        .display()
        .to_string()
}

#[test]
fn the_example_hook_refuses_a_push_to_main_through_mcp_and_logs_every_call() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("hook.log");
    let seen = {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
        let out = output_within(
            Command::new(sdk_python())
                .arg(script)
                .args([
                    "run",
                    nestbox().to_str().unwrap(),
                    "--backend",
                    "local",
                    "--hook",
                ])
                .arg(example_hook())
                .env("NESTBOX_HOOK_LOG", &log)
                .current_dir(work.path()),
            Duration::from_secs(120),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The force push to main: the guard would ask, but the hook's deny comes first.
    let refusal = seen
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["step"] == "needs_approval")
        .unwrap();
    let refused = &refusal["value"]["structuredContent"]["refused"];
    assert_eq!(refused["cause"]["kind"], "hook", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("agents do not push to main"),
        "{refused}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // caged, refused (hardline: the hook still saw it), needs_approval; bad_args never
    // reached the gate.
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[1]["verdict"], "hardline");
    assert_eq!(lines[2]["findings"][0], "git.force_push");
}

#[test]
fn nestbox_exec_runs_the_same_hook_and_exits_125_on_its_deny() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("hook.log");
    let out = output_within(
        Command::new(nestbox())
            .args(["exec", "--backend", "local", "--approval", "deny", "--hook"])
            .arg(example_hook())
            .args(["--", "git", "push", "origin", "main"])
            .env("NESTBOX_HOOK_LOG", &log)
            .current_dir(work.path()),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused by hook"), "{err}");
    assert!(err.contains("agents do not push to main"), "{err}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("\"tool\": \"exec\""), "{logged}");
}
