//! Approval modes, remembered approvals and the backend's confinement, through the gate.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use nestbox_exec::approval::Answer;
use nestbox_exec::gate::DenialCause;
use nestbox_exec::{ApprovalMode, ApprovalStore, Choice, ClearedBy, Gate, TerminalPrompt};

use crate::common::*;

#[tokio::test]
async fn clean_commands_run_in_every_mode_without_asking() {
    let d = scratch();
    for mode in [
        ApprovalMode::Deny,
        ApprovalMode::Approve,
        ApprovalMode::Interactive,
    ] {
        let asker = Scripted::new(vec![]);
        let gate = Gate::new(mode, &cage(d.path())).with_approver(asker.clone());
        let c = gate.check(&run("cargo test --locked")).await.unwrap();
        assert_eq!(c.cleared_by, ClearedBy::Clean);
        assert_eq!(asker.times_asked(), 0);
    }
}

#[tokio::test]
async fn deny_mode_refuses_what_needs_approval_and_says_what_and_why() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Deny, &cage(d.path()));
    let e = gate
        .check(&run("git push --force origin main"))
        .await
        .unwrap_err();
    assert_eq!(e.cause, DenialCause::NeedsApproval);
    assert!(e.message.contains("git.force_push"), "{}", e.message);
    assert_eq!(e.findings[0].matched, "git push --force origin main");
}

#[tokio::test]
async fn approve_mode_approves_approval_findings_but_never_hardline_ones() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Approve, &cage(d.path()));
    let c = gate.check(&run("git reset --hard HEAD~3")).await.unwrap();
    assert_eq!(c.cleared_by, ClearedBy::ApproveMode);
    let e = gate
        .check(&run("sudo rm -rf --no-preserve-root /"))
        .await
        .unwrap_err();
    assert_eq!(e.cause, DenialCause::Hardline);
    assert!(e.message.contains("rm.recursive_root"), "{}", e.message);
    assert!(e.message.contains("Do not retry"), "{}", e.message);
}

#[tokio::test]
async fn commands_the_guard_cannot_parse_need_approval() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Deny, &cage(d.path()));
    let e = gate.check(&run("echo \"unterminated")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::NeedsApproval);
    assert!(e.message.contains("parse.unanalysed"), "{}", e.message);
}

#[tokio::test]
async fn interactive_once_approves_this_call_only() {
    let d = scratch();
    let asker = Scripted::new(vec![
        Answer::Chose(Choice::Once),
        Answer::Chose(Choice::Deny),
    ]);
    let gate = Gate::new(ApprovalMode::Interactive, &cage(d.path())).with_approver(asker.clone());
    let c = gate.check(&run("git clean -fdx")).await.unwrap();
    assert_eq!(c.cleared_by, ClearedBy::Once);
    let e = gate.check(&run("git clean -fdx")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::UserDenied);
    assert_eq!(asker.times_asked(), 2);
    let asked = asker.asked.lock().unwrap();
    assert_eq!(asked[0].items[0].source, "git.clean_force");
    assert!(asked[0].can_remember);
}

#[tokio::test]
async fn interactive_session_approves_the_same_pattern_for_the_rest_of_the_session_only() {
    let d = scratch();
    let asker = Scripted::new(vec![Answer::Chose(Choice::Session)]);
    let gate = Gate::new(ApprovalMode::Interactive, &cage(d.path())).with_approver(asker.clone());
    gate.check(&run("git push --force origin feature"))
        .await
        .unwrap();
    let again = gate
        .check(&run("git  push '--force' origin feature"))
        .await
        .unwrap();
    assert_eq!(again.cleared_by, ClearedBy::Remembered);
    assert_eq!(asker.times_asked(), 1);
    // A different target is a different pattern: asked again (and the script has no answer).
    let e = gate
        .check(&run("git push --force origin main"))
        .await
        .unwrap_err();
    assert_eq!(e.cause, DenialCause::NoOneToAsk);
    // A new session remembers nothing.
    let fresh = Gate::new(ApprovalMode::Deny, &cage(d.path()));
    assert!(
        fresh
            .check(&run("git push --force origin feature"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn interactive_always_stores_the_precise_pattern_for_later_sessions() {
    let d = scratch();
    let data = scratch();
    let store = ApprovalStore::at(data.path().join("approvals.json"));
    let asker = Scripted::new(vec![Answer::Chose(Choice::Always)]);
    let gate = Gate::new(ApprovalMode::Interactive, &cage(d.path()))
        .with_store(store.clone())
        .with_approver(asker);
    assert_eq!(
        gate.check(&run("chmod -R 777 ./shared"))
            .await
            .unwrap()
            .cleared_by,
        ClearedBy::Always
    );
    let stored = store.list().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].key,
        "perms.world_writable_recursive chmod -R 777 ./shared"
    );

    let later = Gate::new(ApprovalMode::Deny, &cage(d.path())).with_store(store.clone());
    let c = later.check(&run("chmod -R 777 ./shared")).await.unwrap();
    assert_eq!(c.cleared_by, ClearedBy::Remembered);
    assert!(later.check(&run("chmod -R 777 ./other")).await.is_err());
    // Removing the entry revokes it at once.
    store.remove(&stored[0].key).unwrap();
    assert!(later.check(&run("chmod -R 777 ./shared")).await.is_err());
}

#[tokio::test]
async fn a_store_the_backend_can_write_is_not_used() {
    let work = scratch();
    let store = ApprovalStore::at(work.path().join(".local/share/nestbox/approvals.json"));
    store
        .add(
            &nestbox_exec::guard::classify("git reset --hard")
                .approval_keys()
                .unwrap(),
            "git reset --hard",
        )
        .unwrap();
    let gate = Gate::new(ApprovalMode::Deny, &cage(work.path())).with_store(store);
    assert!(
        gate.warnings()[0].contains("not using the approvals file"),
        "{:?}",
        gate.warnings()
    );
    assert!(gate.check(&run("git reset --hard")).await.is_err());
}

#[tokio::test]
async fn silence_and_a_missing_terminal_are_denials() {
    let d = scratch();
    let asker = Scripted::new(vec![Answer::TimedOut]);
    let gate = Gate::new(ApprovalMode::Interactive, &cage(d.path())).with_approver(asker);
    let e = gate.check(&run("git reset --hard")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::ApprovalTimeout);

    let gate = Gate::new(ApprovalMode::Interactive, &cage(d.path())).with_approver(Arc::new(
        TerminalPrompt {
            device: "/nonexistent/tty".into(),
            timeout: Duration::from_secs(1),
        },
    ));
    let e = gate.check(&run("git reset --hard")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::NoOneToAsk);
}

#[tokio::test]
async fn a_hooks_ask_can_be_approved_once_but_not_remembered() {
    let d = scratch();
    let h = hook_script(
        d.path(),
        "ask",
        "cat >/dev/null; echo '{\"decision\":\"ask\",\"reason\":\"prod\"}'",
    );
    let asker = Scripted::new(vec![Answer::Chose(Choice::Once)]);
    let gate = Gate::new(ApprovalMode::Interactive, &cage(d.path()))
        .with_hooks([h])
        .with_approver(asker.clone());
    gate.check(&run("./release.sh")).await.unwrap();
    let asked = asker.asked.lock().unwrap();
    assert!(!asked[0].can_remember);
    assert!(asked[0].items[0].source.starts_with("hook "));
}

#[tokio::test]
async fn a_container_with_no_host_exposure_waives_local_effects_only() {
    let gate = Gate::new(ApprovalMode::Deny, &sealed_container());
    let c = gate
        .check(&run("rm -rf ~ && git reset --hard"))
        .await
        .unwrap();
    assert_eq!(c.cleared_by, ClearedBy::Confined);
    assert!(c.findings.iter().all(|f| f.confined));
    // A remote effect still needs approval; a hardline finding is still refused.
    assert!(
        gate.check(&run("git push --force origin main"))
            .await
            .is_err()
    );
    let e = gate.check(&run("rm -rf /")).await.unwrap_err();
    assert_eq!(e.cause, DenialCause::Hardline);
}

#[tokio::test]
async fn the_cage_waives_nothing_because_its_files_are_the_hosts() {
    let d = scratch();
    let gate = Gate::new(ApprovalMode::Deny, &cage(d.path()));
    assert!(gate.check(&run("rm -rf ~")).await.is_err());
}

#[tokio::test]
async fn the_terminal_prompt_works_on_a_real_terminal_and_ignores_type_ahead() {
    let (master, slave_path) = open_pty();
    let d = scratch();
    let prompt = TerminalPrompt {
        device: slave_path.into(),
        timeout: Duration::from_secs(10),
    };
    let gate =
        Gate::new(ApprovalMode::Interactive, &cage(d.path())).with_approver(Arc::new(prompt));
    let mut master = std::fs::File::from(master);
    // Typed before the prompt appears: must not count as an answer.
    master.write_all(b"o\n").unwrap();
    let person = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&seen).contains("Allow?") {
            let n = master.read(&mut buf).unwrap();
            seen.extend_from_slice(&buf[..n]);
        }
        master.write_all(b"d\n").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        String::from_utf8_lossy(&seen).into_owned()
    });
    let e = gate.check(&run("git reset --hard")).await.unwrap_err();
    let shown = person.join().unwrap();
    assert_eq!(e.cause, DenialCause::UserDenied, "{shown}");
    assert!(shown.contains("git.reset_hard"), "{shown}");
    assert!(
        shown.contains("[o]nce [s]ession [a]lways [d]eny"),
        "{shown}"
    );
}

/// A pseudo-terminal pair: the master end, and the slave's path.
fn open_pty() -> (OwnedFd, String) {
    // SAFETY: standard pty allocation; each call checks its result.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        (OwnedFd::from_raw_fd(m), path)
    }
}
