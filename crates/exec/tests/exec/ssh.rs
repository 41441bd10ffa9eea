//! The SSH backend against a real sshd on 127.0.0.1 (scripts/services/sshd-up.sh): its own
//! host key, a known_hosts file holding it (strict checking), a key-only login.

use std::path::PathBuf;
use std::time::Duration;

use nestbox_exec::{
    BackendConfig, CommandSpec, ExecConfig, ExecError, HostKeyPolicy, JobState, SshConfig, Stream,
    open,
};

use crate::common::*;

struct Sshd {
    host: String,
    port: u16,
    user: String,
    key: PathBuf,
    known_hosts: PathBuf,
}

fn sshd() -> Sshd {
    let file = std::fs::read_to_string("/run/nestbox-test/sshd.env").unwrap_or_default();
    let get = |name: &str| {
        std::env::var(name).ok().or_else(|| {
            file.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_string)
        })
    };
    let (Some(host), Some(port), Some(user), Some(key), Some(known)) = (
        get("NESTBOX_TEST_SSH_HOST"),
        get("NESTBOX_TEST_SSH_PORT"),
        get("NESTBOX_TEST_SSH_USER"),
        get("NESTBOX_TEST_SSH_KEY"),
        get("NESTBOX_TEST_SSH_KNOWN_HOSTS"),
    ) else {
        panic!(
            "the test sshd is not running (no NESTBOX_TEST_SSH_* and no /run/nestbox-test/sshd.env): \
             start it with scripts/services/sshd-up.sh (scripts/test.sh does this for you)"
        );
    };
    let port: u16 = port.parse().expect("port");
    assert!(
        std::net::TcpStream::connect((host.as_str(), port)).is_ok(),
        "the test sshd does not listen on {host}:{port}: restart it with scripts/services/sshd-up.sh"
    );
    Sshd {
        host,
        port,
        user,
        key: key.into(),
        known_hosts: known.into(),
    }
}

/// A configuration with its own control directory (its own master connection).
fn ssh_config(
    f: impl FnOnce(&mut SshConfig),
) -> (ExecConfig, tempfile::TempDir, tempfile::TempDir) {
    let s = sshd();
    let control = tempfile::Builder::new().prefix("nbssh").tempdir().unwrap();
    let mut c = SshConfig {
        host: s.host,
        port: Some(s.port),
        user: Some(s.user),
        identity: Some(s.key),
        known_hosts: Some(s.known_hosts),
        host_key_policy: HostKeyPolicy::Strict,
        control_dir: Some(control.path().to_path_buf()),
        control_persist: Duration::from_secs(3),
        ..SshConfig::default()
    };
    f(&mut c);
    let (config, state) = config_with_state(BackendConfig::Ssh(c));
    (config, state, control)
}

/// The PID of the master connection whose socket is in `control`.
fn master_pid(control: &std::path::Path) -> u32 {
    let sock = std::fs::read_dir(control)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sock"))
        .expect("a control socket");
    let out = std::process::Command::new("ssh")
        .args([
            "-o",
            &format!("ControlPath={}", sock.display()),
            "-O",
            "check",
            "x",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    text.split("pid=")
        .nth(1)
        .and_then(|t| t.trim_end().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no master: {text}"))
}

#[tokio::test]
async fn ssh_run_reports_exit_code_and_keeps_stdout_and_stderr_apart() {
    let (config, _s, _c) = ssh_config(|_| {});
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
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", "exit 255"]))
        .await
        .unwrap();
    assert_eq!(
        r.exit_code,
        Some(255),
        "a command's own 255 is not a connection error"
    );
    let r = backend
        .run(&CommandSpec::new(["pwd"]).workdir("/tmp"))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "/tmp\n");
}

#[tokio::test]
async fn ssh_forwards_environment_values_without_putting_them_on_a_command_line() {
    let (config, _s, _c) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let secret = secret_value();
    let job = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; sleep 2"])
                .env("NB_TOKEN", secret.clone())
                .env("NB_QUOTED", "it's $(not) `run`"),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        host_processes_with(&secret).is_empty(),
        "a command line carries the value"
    );
    backend
        .wait(&job, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    let out = backend.read(&job, Stream::Stdout, 0, 4096).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.data), secret);
    let r = backend
        .run(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_QUOTED\""])
                .env("NB_QUOTED", "it's $(not) `run`"),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "it's $(not) `run`");
}

#[tokio::test]
async fn ssh_timeout_kills_the_remote_tree() {
    let (config, _s, _c) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!("sleep {n} & setsid sleep {} & echo started; wait", n + 1);
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", &script]).timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, Some(124));
    assert_eq!(r.stdout.text(), "started\n");
    assert_eq!(r.stderr.text(), nestbox_exec::supervisor::TIMEOUT_NOTICE);
    assert_sleeps_gone(n, 2, Duration::from_secs(3), "left on the remote host");
}

#[tokio::test]
async fn ssh_kills_what_a_finished_command_left_running() {
    let (config, _s, _c) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!("sleep {n} & setsid sleep {} & echo done", n + 1);
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", &script]))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "done\n");
    assert_sleeps_gone(n, 2, Duration::from_secs(3), "left on the remote host");
}

#[tokio::test]
async fn ssh_background_job_polls_tails_and_is_killed_with_its_tree() {
    let (config, _s, _c) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!("echo one; echo two >&2; setsid sleep {n} & sleep {}", n + 1);
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
        Duration::from_millis(50),
    )
    .await;
    assert_eq!(got, b"one\n");
    assert_eq!(backend.poll(&job).await.unwrap().state, JobState::Running);
    let killed = backend.kill(&job).await.unwrap();
    assert!(
        matches!(killed.state, JobState::Finished { killed: true, .. }),
        "{killed:?}"
    );
    assert_sleeps_gone(n, 2, Duration::from_secs(3), "left on the remote host");
    let err = backend.read(&job, Stream::Stderr, 0, 100).await.unwrap();
    assert_eq!(err.data, b"two\n");
    let timed = backend
        .spawn(&CommandSpec::new(["sleep", &(n + 2).to_string()]).timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    let s = backend
        .wait(&timed, Some(Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(
        matches!(
            s.state,
            JobState::Finished {
                timed_out: true,
                ..
            }
        ),
        "{s:?}"
    );
    backend.forget(&job).await.unwrap();
    backend.forget(&timed).await.unwrap();
    assert!(matches!(
        backend.poll(&job).await,
        Err(ExecError::NoSuchJob { .. })
    ));
}

#[tokio::test]
async fn ssh_foreground_run_survives_a_cut_connection_and_loses_nothing() {
    let (config, _s, control) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let run = tokio::spawn(async move {
        let cmd = CommandSpec::new([
            "sh",
            "-c",
            "echo before; echo warn >&2; sleep 2; echo after; echo late >&2; exit 7",
        ]);
        backend.run(&cmd).await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let pid = master_pid(control.path());
    // SAFETY: kill(2) on the ssh master this test's backend started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let r = run.await.unwrap().expect("re-attached");
    assert_eq!(r.exit_code, Some(7));
    assert_eq!(r.stdout.text(), "before\nafter\n", "each byte exactly once");
    assert_eq!(r.stderr.text(), "warn\nlate\n");
    let new_pid = master_pid(control.path());
    assert_ne!(new_pid, pid, "a new master carried the re-attach");
}

#[tokio::test]
async fn ssh_background_job_outlives_the_connection() {
    let (config, _s, control) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let job = backend
        .spawn(&CommandSpec::new(["sh", "-c", "sleep 1; echo survived"]))
        .await
        .unwrap();
    let pid = master_pid(control.path());
    // SAFETY: kill(2) on the ssh master this test's backend started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let s = backend
        .wait(&job, Some(Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(
        matches!(s.state, JobState::Finished { exit_code: 0, .. }),
        "{s:?}"
    );
    let out = backend.read(&job, Stream::Stdout, 0, 100).await.unwrap();
    assert_eq!(out.data, b"survived\n");
    backend.forget(&job).await.unwrap();
}

#[tokio::test]
async fn ssh_unreachable_host_or_unknown_host_key_is_refused_with_the_reason() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let (config, _s, _c) = ssh_config(|c| {
        c.port = Some(port);
        c.connect_timeout = Duration::from_secs(3);
    });
    let e = open(&config).await.err().expect("nothing listens there");
    assert!(matches!(e, ExecError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains("refused"), "{e}");

    let empty = tempfile::NamedTempFile::new().unwrap();
    let (config, _s2, _c2) = ssh_config(|c| c.known_hosts = Some(empty.path().to_path_buf()));
    let e = open(&config)
        .await
        .err()
        .expect("unknown host key under strict checking");
    assert!(
        e.to_string().contains("Host key verification failed"),
        "{e}"
    );
}

#[tokio::test]
async fn ssh_command_not_found_is_a_typed_error() {
    let (config, _s, _c) = ssh_config(|_| {});
    let backend = open(&config).await.unwrap();
    let e = backend
        .run(&CommandSpec::new(["no-such-program"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
    let e = backend
        .spawn(&CommandSpec::new(["no-such-program"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
}
