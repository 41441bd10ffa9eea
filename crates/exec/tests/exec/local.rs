//! The local backend through the real cage (`nestbox run`).

use std::time::Duration;

use nestbox_exec::{BackendConfig, CommandSpec, ExecError, JobState, LocalConfig, Stream, open};

use crate::common::*;

fn local_config() -> (
    nestbox_exec::ExecConfig,
    tempfile::TempDir,
    tempfile::TempDir,
) {
    let work = tempfile::tempdir().unwrap();
    let (config, state) = config_with_state(BackendConfig::Local(LocalConfig {
        launcher: Some(nestbox_bin()),
        workdir: Some(work.path().to_path_buf()),
        ..LocalConfig::default()
    }));
    (config, state, work)
}

#[tokio::test]
async fn local_run_reports_exit_code_and_keeps_stdout_and_stderr_apart() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
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
    assert!(!r.timed_out);
    assert_eq!(
        backend.descriptor().isolation,
        nestbox_exec::Isolation::Cage
    );
}

#[tokio::test]
async fn local_run_is_really_caged() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "cat /etc/shadow; echo rc=$?",
        ]))
        .await
        .unwrap();
    assert!(r.stdout.text().contains("rc=1"), "{}", r.stdout.text());
    assert!(
        r.stderr.text().contains("Permission denied"),
        "{}",
        r.stderr.text()
    );
}

#[tokio::test]
async fn local_forwards_environment_values_without_putting_them_on_a_command_line() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let secret = secret_value();
    let job = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; sleep 2"])
                .env("NB_TOKEN", secret.clone()),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        host_processes_with(&secret).is_empty(),
        "a command line carries the value"
    );
    let status = backend
        .wait(&job, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert!(
        matches!(status.state, JobState::Finished { exit_code: 0, .. }),
        "{status:?}"
    );
    let out = backend
        .read(&job, Stream::Stdout, 0, 1 << 16)
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.data), secret);
    assert!(out.complete);
}

#[tokio::test]
async fn local_timeout_kills_the_whole_step_tree() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!("sleep {n} & setsid sleep {} & echo started; wait", n + 1);
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", &script]).timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.stdout.text(), "started\n");
    assert_sleeps_gone(n, 2, Duration::from_secs(3), "still running");
}

#[tokio::test]
async fn local_background_job_can_be_polled_tailed_and_killed() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!(
        "echo one; echo two >&2; setsid sleep {n} & sleep {}; echo never",
        n + 1
    );
    let job = backend
        .spawn(&CommandSpec::new(["sh", "-c", &script]))
        .await
        .unwrap();
    let got = tail_until(
        backend.as_ref(),
        &job,
        Stream::Stdout,
        b"one\n",
        3,
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(got, b"one\n", "tail by offsets in pieces of 3 bytes");
    let status = backend.poll(&job).await.unwrap();
    assert_eq!(status.state, JobState::Running);
    let killed = backend.kill(&job).await.unwrap();
    assert!(
        matches!(killed.state, JobState::Finished { killed: true, .. }),
        "{killed:?}"
    );
    assert_sleeps_gone(n, 2, Duration::from_secs(3), "still running");
    let err = backend.read(&job, Stream::Stderr, 0, 100).await.unwrap();
    assert_eq!(err.data, b"two\n");
    assert!(err.complete);
    backend.forget(&job).await.unwrap();
    assert!(matches!(
        backend.poll(&job).await,
        Err(ExecError::NoSuchJob { .. })
    ));
}

#[tokio::test]
async fn local_command_not_found_is_a_typed_error() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let e = backend
        .run(&CommandSpec::new(["no-such-program-here"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
}

#[tokio::test]
async fn local_large_output_is_bounded_and_spilled_whole() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "head -c 3000000 /dev/zero | tr '\\0' x; echo END",
        ]))
        .await
        .unwrap();
    assert_eq!(r.stdout.total_bytes, 3_000_004);
    assert!(r.stdout.truncated);
    assert!(r.stdout.head.len() + r.stdout.tail.len() <= 64 * 1024);
    assert!(r.stdout.tail.ends_with(b"xEND\n"));
    let spilled = std::fs::metadata(r.stdout.full_output.as_ref().unwrap()).unwrap();
    assert_eq!(spilled.len(), 3_000_004);
}

#[tokio::test]
async fn a_job_id_that_does_not_exist_is_a_typed_error() {
    let (config, _s, _w) = local_config();
    let backend = open(&config).await.unwrap();
    let id = nestbox_exec::JobId::parse("0123456789abcdef").unwrap();
    assert!(matches!(
        backend.poll(&id).await,
        Err(ExecError::NoSuchJob { .. })
    ));
    assert!(matches!(
        backend.read(&id, Stream::Stdout, 0, 10).await,
        Err(ExecError::NoSuchJob { .. })
    ));
}
