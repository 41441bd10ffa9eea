//! Hook programs as real processes: their three answers, every way of failing (which is a
//! deny), how several combine, and what they are told.

use std::time::{Duration, Instant};

use nestbox_exec::gate::DenialCause;
use nestbox_exec::{ApprovalMode, ClearedBy, Gate};

use crate::common::*;

const ALLOW: &str = "cat >/dev/null; echo '{\"decision\":\"allow\"}'";

#[tokio::test]
async fn a_hook_that_allows_lets_a_clean_command_through() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Deny, &cage(d.path())).with_hooks([hook_script(
        d.path(),
        "allow",
        ALLOW,
    )]);
    let c = gate.check(&run("ls -la")).await.unwrap();
    assert_eq!(c.cleared_by, ClearedBy::Clean);
}

#[tokio::test]
async fn a_hook_that_denies_refuses_with_its_reason() {
    let d = scratch();
    let h = hook_script(
        d.path(),
        "deny",
        "cat >/dev/null; echo '{\"decision\":\"deny\",\"reason\":\"not on fridays\"}'",
    );
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([h]);
    let e = gate.check(&run("ls")).await.unwrap_err();
    assert!(matches!(e.cause, DenialCause::Hook { .. }), "{e:?}");
    assert!(e.message.contains("not on fridays"), "{}", e.message);
}

#[tokio::test]
async fn a_hook_that_asks_sends_the_call_to_approval() {
    let d = scratch();
    let ask = "cat >/dev/null; echo '{\"decision\":\"ask\",\"reason\":\"deploy script\"}'";
    let denied = Gate::new(ApprovalMode::Deny, &cage(d.path())).with_hooks([hook_script(
        d.path(),
        "ask",
        ask,
    )]);
    let e = denied.check(&run("./deploy.sh")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::NeedsApproval);
    assert!(e.message.contains("deploy script"), "{}", e.message);

    let approved = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([hook_script(
        d.path(),
        "ask2",
        ask,
    )]);
    let c = approved.check(&run("./deploy.sh")).await.unwrap();
    assert_eq!(c.cleared_by, ClearedBy::ApproveMode);
}

#[tokio::test]
async fn a_hook_that_prints_garbage_denies() {
    let d = scratch();
    for (name, body) in [
        ("text", "cat >/dev/null; echo allow"),
        ("empty", "cat >/dev/null"),
        ("unknown", "cat >/dev/null; echo '{\"decision\":\"yes\"}'"),
        (
            "two",
            "cat >/dev/null; echo '{\"decision\":\"allow\"}{\"decision\":\"allow\"}'",
        ),
        (
            "huge",
            "cat >/dev/null; head -c 200000 /dev/zero | tr '\\0' ' '; echo '{\"decision\":\"allow\"}'",
        ),
    ] {
        let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([hook_script(
            d.path(),
            name,
            body,
        )]);
        let e = gate.check(&run("ls")).await.unwrap_err();
        assert!(matches!(e.cause, DenialCause::Hook { .. }), "{name}: {e:?}");
        assert!(e.message.contains("failed"), "{name}: {}", e.message);
    }
}

#[tokio::test]
async fn a_hook_that_crashes_or_exits_non_zero_denies_even_after_allowing() {
    let d = scratch();
    for (name, body) in [
        (
            "exit3",
            "cat >/dev/null; echo '{\"decision\":\"allow\"}'; exit 3",
        ),
        (
            "segv",
            "cat >/dev/null; echo '{\"decision\":\"allow\"}'; kill -SEGV $$",
        ),
    ] {
        let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([hook_script(
            d.path(),
            name,
            body,
        )]);
        let e = gate.check(&run("ls")).await.unwrap_err();
        assert!(
            e.message.contains("exited with status"),
            "{name}: {}",
            e.message
        );
    }
}

#[tokio::test]
async fn a_hook_that_cannot_start_denies() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path()))
        .with_hooks([nestbox_exec::Hook::new(d.path().join("missing-hook"))]);
    let e = gate.check(&run("ls")).await.unwrap_err();
    assert!(e.message.contains("could not be started"), "{}", e.message);
}

#[tokio::test]
async fn a_hook_that_times_out_denies_and_its_children_are_killed() {
    let d = scratch();
    let marker = 60_000 + std::process::id() % 1000;
    let mut h = hook_script(
        d.path(),
        "slow",
        &format!("sleep {marker} & sleep {}", marker + 1),
    );
    h.timeout = Duration::from_millis(300);
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([h]);
    let start = Instant::now();
    let e = gate.check(&run("ls")).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        e.message.contains("no answer within 300 ms"),
        "{}",
        e.message
    );
    let needle = format!("sleep {marker}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while still_running(&needle) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !still_running(&needle),
        "the hook's child survived its timeout"
    );
}

fn still_running(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == needle)
            .unwrap_or(false)
    })
}

#[tokio::test]
async fn with_several_hooks_any_deny_wins_and_every_hook_still_sees_the_call() {
    let d = scratch();
    let log = file(&d, "seen.log");
    let logger = hook_script(
        d.path(),
        "logger",
        &format!(
            "cat >> {}; echo >> {}; echo '{{\"decision\":\"allow\"}}'",
            log.display(),
            log.display()
        ),
    );
    let denier = hook_script(
        d.path(),
        "denier",
        "cat >/dev/null; echo '{\"decision\":\"deny\",\"reason\":\"second says no\"}'",
    );
    let asker = hook_script(
        d.path(),
        "asker",
        "cat >/dev/null; echo '{\"decision\":\"ask\"}'",
    );
    let gate =
        Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([asker, denier, logger]);
    let e = gate.check(&run("make test")).await.unwrap_err();
    assert!(e.message.contains("second says no"), "{}", e.message);
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(seen.contains("\"make test\""), "{seen}");
}

#[tokio::test]
async fn hooks_receive_the_call_the_backend_and_the_guards_findings() {
    let d = scratch();
    let log = file(&d, "req.json");
    let h = hook_script(
        d.path(),
        "record",
        &format!("cat > {}; echo '{{\"decision\":\"allow\"}}'", log.display()),
    );
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([h]);
    let mut call = run("git push --force origin main");
    call.workdir = Some("/work/repo".into());
    let c = gate.check(&call).await.unwrap();
    let req: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!(req["version"], 1);
    assert_eq!(req["event"], "pre_tool_call");
    assert_eq!(req["tool"], "run");
    assert_eq!(req["command"], "git push --force origin main");
    assert_eq!(req["workdir"], "/work/repo");
    assert_eq!(req["step_id"], c.step_id.as_str());
    assert_eq!(req["backend"]["kind"], "local");
    assert_eq!(req["backend"]["host_exposed"], true);
    assert_eq!(req["approval_mode"], "approve");
    assert_eq!(req["guard"]["verdict"], "approval");
    assert_eq!(req["guard"]["findings"][0]["id"], "git.force_push");
    assert_eq!(
        req["guard"]["findings"][0]["approval_key"],
        "git.force_push git push --force origin main"
    );
}

#[tokio::test]
async fn hooks_see_hardline_calls_but_cannot_allow_them() {
    let d = scratch();
    let log = file(&d, "req.json");
    let h = hook_script(
        d.path(),
        "yes",
        &format!("cat > {}; echo '{{\"decision\":\"allow\"}}'", log.display()),
    );
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([h]);
    let e = gate.check(&run("rm -rf /")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::Hardline);
    let req = std::fs::read_to_string(&log).unwrap();
    assert!(req.contains("\"verdict\":\"hardline\""), "{req}");
}

#[tokio::test]
async fn a_hooks_allow_does_not_skip_approval_of_guard_findings() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Deny, &cage(d.path())).with_hooks([hook_script(
        d.path(),
        "allow",
        ALLOW,
    )]);
    let e = gate.check(&run("git reset --hard")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::NeedsApproval);
}

#[tokio::test]
async fn job_operations_go_to_hooks_too() {
    let d = scratch();
    let log = file(&d, "req.json");
    let h = hook_script(
        d.path(),
        "record",
        &format!(
            "cat > {}; echo '{{\"decision\":\"deny\",\"reason\":\"no kills\"}}'",
            log.display()
        ),
    );
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path())).with_hooks([h]);
    let call = nestbox_exec::ToolCall {
        tool: "process".into(),
        action: Some("kill".into()),
        job: Some("j-1".into()),
        ..Default::default()
    };
    let e = gate.check(&call).await.unwrap_err();
    assert!(e.message.contains("no kills"));
    let req: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!(req["action"], "kill");
    assert_eq!(req["job"], "j-1");
    assert_eq!(req["command"], serde_json::Value::Null);
}
