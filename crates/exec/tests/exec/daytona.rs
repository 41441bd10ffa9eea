//! The Daytona backend against a local fake of Daytona's REST API (tests/exec/fakes/daytona.rs)
//! that follows the published API shapes. Daytona itself cannot be reached from here: these
//! tests check nestbox's side (requests, auth, lifecycle, limits, jobs, timeouts), not the
//! live service.

use std::time::Duration;

use nestbox_exec::{
    BackendConfig, CommandSpec, DaytonaConfig, DaytonaOnClose, ExecConfig, ExecError, JobState,
    Stream, open,
};

use crate::common::*;
use crate::fakes::daytona::FakeDaytona;

fn daytona_config(
    fake: &FakeDaytona,
    key: &str,
    f: impl FnOnce(&mut DaytonaConfig),
) -> (ExecConfig, tempfile::TempDir, tempfile::TempDir) {
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let mut c = DaytonaConfig {
        api_url: Some(fake.url.clone()),
        api_key_file: Some(key_file),
        cpu: Some(2),
        memory: Some(3 << 29),
        disk: Some(5 << 30),
        ..DaytonaConfig::default()
    };
    f(&mut c);
    let (config, state) = config_with_state(BackendConfig::Daytona(c));
    (config, state, keys)
}

#[tokio::test]
async fn daytona_run_keeps_stdout_and_stderr_apart_and_applies_the_limits() {
    let fake = FakeDaytona::start("dtn-key").await;
    let (config, _s, _k) = daytona_config(&fake, "dtn-key", |_| {});
    let mut backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.stdout.text(), "out\n");
    assert_eq!(r.stderr.text(), "err\n");
    let e = backend
        .run(&CommandSpec::new(["no-such-program-nb"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
    let created: Vec<_> = fake
        .state
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.method == "POST" && s.path == "/sandbox")
        .cloned()
        .collect();
    assert_eq!(created.len(), 1, "one sandbox for all the commands");
    let body = &created[0].body;
    assert_eq!(
        (
            body["cpu"].as_u64(),
            body["memory"].as_u64(),
            body["disk"].as_u64()
        ),
        (Some(2), Some(2), Some(5)),
        "{body}"
    );
    assert_eq!(body["networkBlockAll"], true);
    assert!(
        fake.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.authorization == "Bearer dtn-key")
    );
    backend.close().await.unwrap();
    let states: Vec<_> = fake
        .state
        .sandboxes
        .lock()
        .unwrap()
        .values()
        .map(|v| v["state"].clone())
        .collect();
    assert_eq!(
        states,
        ["destroyed"],
        "an anonymous sandbox is deleted on close"
    );
}

#[tokio::test]
async fn daytona_resumes_a_stopped_sandbox_by_name_and_stops_it_on_close() {
    let fake = FakeDaytona::start("k").await;
    let (config, _s, _k) = daytona_config(&fake, "k", |c| c.name = Some("ci-box".into()));
    let mut first = open(&config).await.unwrap();
    first.run(&CommandSpec::new(["true"])).await.unwrap();
    first.close().await.unwrap();
    let id = fake
        .state
        .sandboxes
        .lock()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    assert_eq!(
        fake.state.sandboxes.lock().unwrap()[&id]["state"],
        "stopped"
    );
    let mut second = open(&config).await.unwrap();
    let r = second
        .run(&CommandSpec::new(["echo", "again"]))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "again\n");
    assert_eq!(
        fake.state.sandboxes.lock().unwrap().len(),
        1,
        "resumed, not created again"
    );
    assert!(fake.routes().contains(&format!("POST /sandbox/{id}/start")));
    second.close().await.unwrap();
}

#[tokio::test]
async fn daytona_refused_key_says_where_it_came_from_and_runs_nothing() {
    let fake = FakeDaytona::start("right").await;
    let (config, _s, _k) = daytona_config(&fake, "wrong", |_| {});
    let e = match open(&config).await {
        Ok(_) => panic!("opened with a refused key"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(matches!(e, ExecError::Unavailable { .. }), "{text}");
    assert!(
        text.contains("the key file") && text.contains("HTTP 401"),
        "{text}"
    );
    assert!(!text.contains("wrong"), "the key is in the error: {text}");
    assert!(fake.state.sandboxes.lock().unwrap().is_empty());
}

#[tokio::test]
async fn daytona_timeout_kills_the_whole_tree_inside_the_sandbox() {
    let fake = FakeDaytona::start("k").await;
    let (config, _s, _k) = daytona_config(&fake, "k", |_| {});
    let backend = open(&config).await.unwrap();
    assert_timeout_kills_stubborn_tree(
        backend.as_ref(),
        Duration::from_secs(1),
        "left in the sandbox",
    )
    .await;
}

#[tokio::test]
async fn daytona_background_jobs_are_polled_read_waited_for_and_killed_from_another_process() {
    let fake = FakeDaytona::start("k").await;
    let (config, _s, _k) =
        daytona_config(&fake, "k", |c| c.on_close = Some(DaytonaOnClose::Delete));
    let mut backend = open(&config).await.unwrap();
    let secret = secret_value();
    let job = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; echo e >&2; exit 6"])
                .env("NB_TOKEN", secret.clone()),
        )
        .await
        .unwrap();
    let n = unique_seconds();
    let long = backend
        .spawn(&CommandSpec::new([
            "sh",
            "-c",
            &format!(
                "setsid sleep {n} & (trap '' TERM; exec sleep {}) & wait",
                n + 1
            ),
        ]))
        .await
        .unwrap();
    backend.close().await.unwrap();
    let other = open(&config).await.unwrap();
    let s = other
        .wait(&job, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(
        s.state,
        JobState::Finished {
            exit_code: 6,
            timed_out: false,
            killed: false
        }
    );
    let c = other.read(&job, Stream::Stdout, 0, 4096).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&c.data), secret);
    assert!(
        host_processes_with(&secret).is_empty(),
        "a command line carries the value"
    );
    let k = other.kill(&long).await.unwrap();
    assert!(
        matches!(k.state, JobState::Finished { killed: true, .. }),
        "{k:?}"
    );
    assert_sleeps_gone(n, 2, Duration::from_secs(5), "survived the kill");
    other.forget(&job).await.unwrap();
    assert!(matches!(
        other.poll(&job).await,
        Err(ExecError::NoSuchJob { .. })
    ));
}
