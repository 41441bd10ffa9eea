//! The Modal backend against a local fake of Modal's API (tests/exec/fakes/modal.rs), built
//! from the same vendored definitions as the client. Modal itself cannot be reached from
//! here: these tests check nestbox's side of the protocol (calls, metadata, credentials,
//! streams, timeouts, jobs), not the live service.

use std::path::PathBuf;
use std::time::Duration;

use nestbox_exec::{
    BackendConfig, CommandSpec, ExecConfig, ExecError, Isolation, JobState, ModalConfig,
    ModalCredentials, ModalManaged, Stream, open,
};

use crate::common::*;
use crate::fakes::modal::{FakeModal, Options};

/// The user's own credentials in the environment would win over the test profile.
fn no_modal_env() {
    for v in [
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "MODAL_PROFILE",
        "MODAL_SERVER_URL",
    ] {
        assert!(
            std::env::var_os(v).is_none(),
            "{v} is set in this environment; it would win over the tests' profile: unset it to run the Modal tests"
        );
    }
}

/// A profile file with the fake's pair, and a configuration that points at the fake.
fn modal_config(
    fake: &FakeModal,
    f: impl FnOnce(&mut ModalConfig),
) -> (ExecConfig, tempfile::TempDir, tempfile::TempDir) {
    no_modal_env();
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("modal.toml");
    std::fs::write(
        &path,
        "[default]\ntoken_id = \"ak-fake\"\ntoken_secret = \"as-fake\"\n",
    )
    .unwrap();
    let mut c = ModalConfig {
        server_url: Some(fake.url.clone()),
        config_path: Some(path),
        image: "python:3.12-slim".into(),
        cpu: Some(1.5),
        memory: Some(512 << 20),
        disk: Some(2 << 30),
        ..ModalConfig::default()
    };
    f(&mut c);
    let (config, state) = config_with_state(BackendConfig::Modal(c));
    (config, state, home)
}

#[tokio::test]
async fn modal_run_keeps_stdout_and_stderr_apart_and_reports_the_exit_code() {
    let fake = FakeModal::start(Options::default()).await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let mut backend = open(&config).await.unwrap();
    assert_eq!(backend.descriptor().isolation, Isolation::RemoteSandbox);
    assert!(!backend.descriptor().host_exposure.exposed);
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
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", "kill -9 $$"]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(137));
    let e = backend
        .run(&CommandSpec::new(["no-such-program-nb"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
    // The sandbox was made as configured.
    let sandboxes = fake.state.sandboxes.lock().unwrap().clone();
    assert_eq!(sandboxes.len(), 1, "one sandbox for all the commands");
    let sb = sandboxes.values().next().unwrap().clone();
    let res = sb.definition.resources.unwrap();
    assert_eq!(
        (res.milli_cpu, res.memory_mb, res.ephemeral_disk_mb),
        (1500, 512, 2048)
    );
    assert!(sb.definition.block_network);
    assert_eq!(sb.definition.timeout_secs, 3600);
    assert_eq!(sb.definition.entrypoint_args, ["sleep", "infinity"]);
    backend.close().await.unwrap();
    let sandboxes = fake.state.sandboxes.lock().unwrap().clone();
    assert!(
        sandboxes.values().all(|s| s.terminated),
        "close terminates the sandbox"
    );
}

#[tokio::test]
async fn modal_sends_the_token_pair_client_identity_and_auth_token_on_control_plane_calls() {
    let fake = FakeModal::start(Options::default()).await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let backend = open(&config).await.unwrap();
    backend.run(&CommandSpec::new(["true"])).await.unwrap();
    let rpcs = fake.rpcs();
    assert_eq!(
        rpcs.first().map(String::as_str),
        Some("AuthTokenGet"),
        "{rpcs:?}"
    );
    for want in [
        "AppGetOrCreate",
        "ImageGetOrCreate",
        "SandboxCreate",
        "SandboxGetTaskId",
        "TaskGetCommandRouterAccess",
        "TaskExecStart",
        "TaskExecStdioRead",
        "TaskExecWait",
    ] {
        assert!(
            rpcs.iter().any(|r| r == want),
            "{want} not called: {rpcs:?}"
        );
    }
    for call in fake.state.calls.lock().unwrap().iter() {
        if call.rpc.starts_with("Task") && call.rpc != "TaskGetCommandRouterAccess" {
            assert!(
                call.metadata["authorization"].starts_with("Bearer jwt-"),
                "{call:?}"
            );
            assert!(
                !call.metadata.contains_key("x-modal-token-secret"),
                "router calls carry only the JWT"
            );
            continue;
        }
        assert_eq!(call.metadata["x-modal-token-id"], "ak-fake");
        assert_eq!(call.metadata["x-modal-client-type"], "7");
        assert_eq!(call.metadata["x-modal-client-version"], "1.0.0");
        if call.rpc != "AuthTokenGet" {
            assert!(
                call.metadata["x-modal-auth-token"].starts_with("auth-"),
                "{call:?}"
            );
        }
    }
}

#[tokio::test]
async fn modal_refuses_wrong_credentials_at_open_and_says_where_they_came_from() {
    let fake = FakeModal::start(Options {
        token_secret: "as-other".into(),
        ..Options::default()
    })
    .await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let e = match open(&config).await {
        Ok(_) => panic!("opened with a refused token"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(matches!(e, ExecError::Unavailable { .. }), "{text}");
    assert!(text.contains("profile `default` of"), "{text}");
    assert!(text.contains("Unauthenticated"), "{text}");
    assert!(
        !text.contains("as-fake"),
        "the secret is in the error: {text}"
    );
    assert_eq!(fake.rpcs(), ["AuthTokenGet"], "nothing else was tried");
}

#[tokio::test]
async fn modal_managed_credentials_send_placeholders_never_the_users_own() {
    let gateway = FakeModal::start(Options {
        gateway_placeholders: Some((
            "nestbox:resolve:env:MODAL_TOKEN_ID".into(),
            "nestbox:resolve:env:MODAL_TOKEN_SECRET".into(),
        )),
        token_secret: "as-held-by-the-gateway".into(),
        ..Options::default()
    })
    .await;
    let (config, _s, _h) = modal_config(&gateway, |c| {
        c.credentials = ModalCredentials::Managed;
        c.server_url = None;
        c.managed = Some(ModalManaged {
            server_url: gateway.url.clone(),
            token_id: "nestbox:resolve:env:MODAL_TOKEN_ID".into(),
            token_secret: "nestbox:resolve:env:MODAL_TOKEN_SECRET".into(),
            ca_file: None,
        });
    });
    let backend = open(&config).await.unwrap();
    assert!(backend.descriptor().target.contains("credential gateway"));
    let r = backend
        .run(&CommandSpec::new(["echo", "via gateway"]))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "via gateway\n");
    for call in gateway.state.calls.lock().unwrap().iter() {
        if let Some(secret) = call.metadata.get("x-modal-token-secret") {
            assert_eq!(secret, "nestbox:resolve:env:MODAL_TOKEN_SECRET", "{call:?}");
        }
    }
}

#[tokio::test]
async fn modal_unreachable_gateway_fails_closed_without_trying_direct_credentials() {
    let direct = FakeModal::start(Options::default()).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    for mode in [ModalCredentials::Managed, ModalCredentials::Auto] {
        let (config, _s, _h) = modal_config(&direct, |c| {
            c.credentials = mode;
            c.server_url = Some(direct.url.clone());
            if mode == ModalCredentials::Auto {
                // auto uses the gateway only without direct credentials
                c.config_path = Some(PathBuf::from("/nonexistent/modal.toml"));
            }
            c.managed = Some(ModalManaged {
                server_url: dead.clone(),
                token_id: "nestbox:resolve:env:MODAL_TOKEN_ID".into(),
                token_secret: "nestbox:resolve:env:MODAL_TOKEN_SECRET".into(),
                ca_file: None,
            });
        });
        let e = match open(&config).await {
            Ok(_) => panic!("{mode:?}: opened through a dead gateway"),
            Err(e) => e,
        };
        assert!(matches!(e, ExecError::Unavailable { .. }), "{mode:?}: {e}");
        assert!(e.to_string().contains(&dead), "{e}");
    }
    assert!(
        direct.rpcs().is_empty(),
        "the direct server was contacted: {:?}",
        direct.rpcs()
    );
}

#[tokio::test]
async fn modal_direct_mode_without_credentials_lists_what_it_checked() {
    let fake = FakeModal::start(Options::default()).await;
    let (config, _s, _h) = modal_config(&fake, |c| {
        c.credentials = ModalCredentials::Direct;
        c.config_path = Some(PathBuf::from("/nonexistent/modal.toml"));
    });
    let e = match open(&config).await {
        Ok(_) => panic!("opened without credentials"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET: not set"),
        "{e}"
    );
    assert!(e.contains("/nonexistent/modal.toml: not found"), "{e}");
    assert!(e.contains("modal token new"), "{e}");
    assert!(fake.rpcs().is_empty());
}

#[tokio::test]
async fn modal_timeout_kills_the_whole_tree_inside_the_sandbox() {
    let fake = FakeModal::start(Options::default()).await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let backend = open(&config).await.unwrap();
    assert_timeout_kills_stubborn_tree(
        backend.as_ref(),
        Duration::from_secs(1),
        "left in the sandbox",
    )
    .await;
    assert!(
        fake.state
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .all(|s| !s.terminated),
        "the supervisor ended it; the sandbox was not needed as a backstop"
    );
}

#[tokio::test]
async fn modal_output_survives_broken_and_slow_streams() {
    let fake = FakeModal::start(Options {
        break_streams_after: Some(2),
        stdio_delay: Some(Duration::from_millis(5)),
        ..Options::default()
    })
    .await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "i=0; while [ $i -lt 3000 ]; do echo line$i; echo err$i >&2; i=$((i+1)); done",
        ]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    let want_out: String = (0..3000).map(|i| format!("line{i}\n")).collect();
    let want_err: String = (0..3000).map(|i| format!("err{i}\n")).collect();
    assert_eq!(r.stdout.total_bytes, want_out.len() as u64);
    assert_eq!(r.stderr.total_bytes, want_err.len() as u64);
    let full = |c: &nestbox_exec::CapturedOutput| match &c.full_output {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => c.text(),
    };
    assert_eq!(
        full(&r.stdout),
        want_out,
        "nothing lost or repeated across reconnections"
    );
    assert_eq!(full(&r.stderr), want_err);
    let reads = fake
        .rpcs()
        .iter()
        .filter(|r| *r == "TaskExecStdioRead")
        .count();
    assert!(reads > 4, "the streams were resumed ({reads} reads)");
}

#[tokio::test]
async fn modal_background_jobs_are_polled_read_waited_for_and_killed_from_another_process() {
    let fake = FakeModal::start(Options::default()).await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let mut backend = open(&config).await.unwrap();
    let secret = secret_value();
    let job = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; echo e >&2; exit 6"])
                .env("NB_TOKEN", secret.clone()),
        )
        .await
        .unwrap();
    assert!(job.as_str().starts_with("sb-"), "{job}");
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
    assert!(
        fake.state
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .all(|s| !s.terminated),
        "a sandbox with background jobs outlives close"
    );
    // A new backend (as a later `nestbox exec` would be) reaches the jobs by id.
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
    assert!(c.complete);
    assert!(
        host_processes_with(&secret).is_empty(),
        "a command line carries the value"
    );
    let req = fake
        .state
        .exec_requests
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.env.get("NB_TOKEN") == Some(&secret));
    assert!(req, "the value travels in the exec request's env field");
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

#[tokio::test]
async fn modal_waits_for_image_builds_and_reports_failed_ones() {
    let fake = FakeModal::start(Options {
        image_build_entries: 3,
        ..Options::default()
    })
    .await;
    let (config, _s, _h) = modal_config(&fake, |_| {});
    let backend = open(&config).await.unwrap();
    backend.run(&CommandSpec::new(["true"])).await.unwrap();
    assert!(fake.rpcs().iter().any(|r| r == "ImageJoinStreaming"));
    let failing = FakeModal::start(Options {
        image_build_entries: 1,
        image_fails: true,
        ..Options::default()
    })
    .await;
    let (config, _s, _h) = modal_config(&failing, |_| {});
    let backend = open(&config).await.unwrap();
    let e = backend.run(&CommandSpec::new(["true"])).await.unwrap_err();
    assert!(e.to_string().contains("Image build for im-x failed"), "{e}");
    assert!(!failing.rpcs().iter().any(|r| r == "SandboxCreate"));
}

#[tokio::test]
async fn modal_refuses_plaintext_to_anything_but_loopback() {
    no_modal_env();
    let (config, _s) = config_with_state(BackendConfig::Modal(ModalConfig {
        server_url: Some("http://api.modal.com".into()),
        config_path: Some(PathBuf::from("/nonexistent")),
        credentials: ModalCredentials::Managed,
        managed: Some(ModalManaged {
            server_url: "http://gateway.example:8080".into(),
            token_id: "x".into(),
            token_secret: "y".into(),
            ca_file: None,
        }),
        image: "python:3.12".into(),
        ..ModalConfig::default()
    }));
    let e = match open(&config).await {
        Ok(_) => panic!("opened a plaintext connection"),
        Err(e) => e,
    };
    assert!(e.to_string().contains("only allowed on loopback"), "{e}");
}
