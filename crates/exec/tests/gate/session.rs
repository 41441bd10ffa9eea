//! A session in front of the real local backend (the cage): a refused command never reaches
//! the backend, an allowed one runs, background jobs are listed and waited for through it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use nestbox_exec::{
    ApprovalMode, BackendConfig, CallError, ExecConfig, Gate, JobState, LocalConfig, ProcessAnswer,
    ProcessOp, Session, Step, open,
};

use crate::common::*;

/// The `nestbox` executable (built on demand when this crate is tested alone).
fn nestbox_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("NESTBOX_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args(["build", "--quiet", "-p", "nestbox", "--bin", "nestbox"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "cargo build -p nestbox failed");
        dir.join("nestbox")
    })
    .clone()
}

async fn session(work: &Path, state: &Path, mode: ApprovalMode) -> Session {
    let config = ExecConfig {
        backend: BackendConfig::Local(LocalConfig {
            launcher: Some(nestbox_bin()),
            workdir: Some(work.to_path_buf()),
            ..LocalConfig::default()
        }),
        output: Default::default(),
        state_dir: Some(state.to_path_buf()),
    };
    let backend = open(&config).await.unwrap();
    let gate = Gate::new(mode, backend.descriptor());
    Session::new(backend, gate)
}

#[tokio::test]
async fn a_refused_command_never_reaches_the_backend() {
    let (work, state) = (scratch(), scratch());
    let s = session(work.path(), state.path(), ApprovalMode::Deny).await;
    let step = Step::shell(&s.shell(), "touch ran && git reset --hard");
    let e = s.run("run", &step).await.unwrap_err();
    assert!(matches!(e, CallError::Denied(_)), "{e}");
    assert_eq!(e.exit_code(), 125);
    assert!(!work.path().join("ran").exists());
}

#[tokio::test]
async fn an_allowed_command_runs_caged_and_says_how_it_got_through() {
    let (work, state) = (scratch(), scratch());
    let s = session(work.path(), state.path(), ApprovalMode::Deny).await;
    let r = s
        .run("run", &Step::shell(&s.shell(), "echo hi; cat /etc/shadow"))
        .await
        .unwrap();
    assert_eq!(r.value.stdout.text(), "hi\n");
    assert_ne!(
        r.value.exit_code,
        Some(0),
        "the cage let /etc/shadow be read"
    );
    assert_eq!(r.clearance.cleared_by, nestbox_exec::ClearedBy::Clean);
}

#[tokio::test]
async fn an_argument_vector_with_a_dangerous_payload_is_refused() {
    let (work, state) = (scratch(), scratch());
    let s = session(work.path(), state.path(), ApprovalMode::Approve).await;
    let step = Step::argv(nestbox_exec::CommandSpec::new(["sh", "-c", "rm -rf /"]));
    let e = s.run("exec", &step).await.unwrap_err();
    assert!(e.to_string().contains("hardline"), "{e}");
}

#[tokio::test]
async fn background_jobs_are_listed_and_waited_for_through_the_session() {
    let (work, state) = (scratch(), scratch());
    let s = session(work.path(), state.path(), ApprovalMode::Deny).await;
    let job = s
        .spawn("run", &Step::shell(&s.shell(), "sleep 0.3; echo done"))
        .await
        .unwrap()
        .value;
    let listed = s.process("process", ProcessOp::List).await.unwrap().value;
    let ProcessAnswer::Jobs { jobs } = listed else {
        panic!("not a list")
    };
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].command, "sleep 0.3; echo done");
    let waited = s
        .process(
            "process",
            ProcessOp::Wait {
                job: job.clone(),
                timeout: Some(Duration::from_secs(30)),
            },
        )
        .await
        .unwrap()
        .value;
    let ProcessAnswer::Status(st) = waited else {
        panic!("not a status")
    };
    assert!(
        matches!(st.state, JobState::Finished { exit_code: 0, .. }),
        "{st:?}"
    );
}
