//! The never-fall-back rule: a configuration names one backend; when that backend cannot be
//! built, `open` returns why, and nothing runs anywhere else. Each case below would have
//! "worked" on the host if the layer fell back.

use std::time::Duration;

use nestbox_exec::{
    ApptainerConfig, BackendConfig, BackendKind, CommandSpec, DockerConfig, ExecConfig, ExecError,
    LocalConfig, SshConfig, open,
};

use crate::common::*;

fn marker_command(marker: &std::path::Path) -> CommandSpec {
    CommandSpec::new(["touch", &marker.display().to_string()])
}

async fn refuses(config: &ExecConfig, marker: &std::path::Path) -> ExecError {
    match open(config).await {
        Ok(b) => {
            // Whatever was opened must be what was asked for; run the marker to prove where.
            let _ = b.run(&marker_command(marker)).await;
            panic!(
                "open succeeded with a {} backend for a {} configuration",
                b.descriptor().kind,
                config.backend.kind()
            );
        }
        Err(e) => {
            assert!(!marker.exists(), "something ran");
            e
        }
    }
}

#[tokio::test]
async fn a_missing_engine_socket_refuses_instead_of_running_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Docker(DockerConfig {
        socket: Some(format!("unix://{}/no-engine.sock", dir.path().display())),
        image: "localhost/busybox".into(),
        ..DockerConfig::default()
    }));
    let e = refuses(&config, &dir.path().join("ran")).await;
    assert!(
        matches!(&e, ExecError::Unavailable { backend: BackendKind::Docker, reason, .. } if reason.contains("no engine socket")),
        "{e}"
    );
}

#[tokio::test]
async fn an_unreachable_ssh_host_refuses_instead_of_running_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let control = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Ssh(SshConfig {
        host: "127.0.0.1".into(),
        port: Some(port),
        connect_timeout: Duration::from_secs(2),
        control_dir: Some(control.path().to_path_buf()),
        ..SshConfig::default()
    }));
    let e = refuses(&config, &dir.path().join("ran")).await;
    assert!(
        matches!(
            e,
            ExecError::Unavailable {
                backend: BackendKind::Ssh,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_missing_apptainer_refuses_instead_of_running_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Apptainer(ApptainerConfig {
        image: "docker://python:3.12".into(),
        search_path: Some(dir.path().display().to_string()),
        ..ApptainerConfig::default()
    }));
    let e = refuses(&config, &dir.path().join("ran")).await;
    assert!(
        matches!(
            e,
            ExecError::Unavailable {
                backend: BackendKind::Apptainer,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_missing_launcher_refuses_instead_of_running_uncaged() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Local(LocalConfig {
        launcher: Some(dir.path().join("no-nestbox")),
        ..LocalConfig::default()
    }));
    let e = refuses(&config, &dir.path().join("ran")).await;
    assert!(
        matches!(
            e,
            ExecError::Unavailable {
                backend: BackendKind::Local,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn an_unknown_backend_name_is_an_error_not_a_default() {
    let e = ExecConfig::from_toml("[backend]\nkind = \"modal\"\n").unwrap_err();
    assert!(
        matches!(e, ExecError::UnknownBackend { ref name } if name == "modal"),
        "{e}"
    );
    let e = "kubernetes".parse::<BackendKind>().unwrap_err();
    assert!(matches!(e, ExecError::UnknownBackend { .. }));
}

#[tokio::test]
async fn a_non_unix_docker_host_is_refused_not_replaced_by_the_default_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Docker(DockerConfig {
        socket: Some("tcp://127.0.0.1:2375".into()),
        image: "localhost/busybox".into(),
        ..DockerConfig::default()
    }));
    let e = refuses(&config, &dir.path().join("ran")).await;
    assert!(
        matches!(
            e,
            ExecError::InvalidConfig {
                backend: BackendKind::Docker,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_backend_that_opens_is_always_the_one_configured() {
    let work = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Local(LocalConfig {
        launcher: Some(nestbox_bin()),
        workdir: Some(work.path().to_path_buf()),
        ..LocalConfig::default()
    }));
    let b = open(&config).await.unwrap();
    assert_eq!(b.descriptor().kind, BackendKind::Local);
    let r = b.run(&CommandSpec::new(["true"])).await.unwrap();
    assert_eq!(r.backend, BackendKind::Local);
}
