//! The Docker backend against real engines: every scenario runs against dockerd *and* against
//! Podman's Docker-compatible API (`dockerd::...` and `podman::...` test names).

use std::time::Duration;

use nestbox_exec::{
    Backend, BackendConfig, CommandSpec, DockerConfig, ExecConfig, ExecError, ExposureSource,
    JobId, JobState, Stream, open,
};

use crate::common::*;

#[derive(Clone, Copy)]
pub enum Engine {
    Dockerd,
    Podman,
}

impl Engine {
    /// The engine's socket, as `scripts/services/*-up.sh` wrote it. Panics with the fix when
    /// the engine is not running: these tests never skip.
    pub fn socket(self) -> String {
        let (var, file, script) = match self {
            Engine::Dockerd => ("NESTBOX_TEST_DOCKER", "dockerd.env", "dockerd-up.sh"),
            Engine::Podman => ("NESTBOX_TEST_PODMAN", "podman.env", "podman-up.sh"),
        };
        let socket = std::env::var(var).ok().or_else(|| {
            let text = std::fs::read_to_string(format!("/run/nestbox-test/{file}")).ok()?;
            text.trim()
                .strip_prefix(&format!("export {var}="))
                .map(str::to_string)
        });
        let Some(socket) = socket.filter(|s| std::path::Path::new(s).exists()) else {
            panic!(
                "{var} is not set and /run/nestbox-test/{file} names no live socket: the engine is not running. \
                 Start it with scripts/services/{script} (scripts/test.sh does this for you)."
            );
        };
        socket
    }
}

pub fn docker_config(
    engine: Engine,
    f: impl FnOnce(&mut DockerConfig),
) -> (ExecConfig, tempfile::TempDir) {
    let mut d = DockerConfig {
        socket: Some(format!("unix://{}", engine.socket())),
        image: "localhost/busybox".into(),
        // Private containers, removed on close: tests leave nothing behind.
        reuse: false,
        ..DockerConfig::default()
    };
    f(&mut d);
    config_with_state(BackendConfig::Docker(d))
}

async fn ps_inside(backend: &dyn Backend) -> String {
    let r = backend
        .run(&CommandSpec::new(["ps", "-o", "pid,args"]))
        .await
        .unwrap();
    r.stdout.text()
}

pub async fn run_reports_exit_code_streams_and_the_hardening(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
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
    let probe = "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls /sys/class/net; cat /proc/1/cmdline | tr '\\0' ' '";
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", probe]))
        .await
        .unwrap();
    let text = r.stdout.text();
    assert!(text.starts_with("65534\n"), "not nobody: {text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(
        text.contains("\nlo\n") && !text.contains("eth0"),
        "network: {text}"
    );
    assert!(text.contains("init"), "PID 1 is not an init: {text}");
    let d = backend.descriptor();
    assert!(!d.host_exposure.exposed, "{:?}", d.host_exposure);
    backend.close().await.unwrap();
}

pub async fn environment_values_never_appear_on_a_command_line(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
    let secret = secret_value();
    let job = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; sleep 2"])
                .env("NB_TOKEN", secret.clone()),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    let out = backend.read(&job, Stream::Stdout, 0, 4096).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.data), secret);
    let r = backend
        .run(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\""])
                .env("NB_TOKEN", secret.clone()),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), secret);
    backend.close().await.unwrap();
}

pub async fn timeout_kills_the_whole_tree_inside_the_container(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!(
        "sleep {n} & setsid sleep {} & (setsid sh -c 'sleep {}' &) ; echo started; wait",
        n + 1,
        n + 2
    );
    let started = std::time::Instant::now();
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", &script]).timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, Some(124));
    assert_eq!(r.stdout.text(), "started\n");
    assert_eq!(
        r.stderr.text(),
        nestbox_exec::supervisor::TIMEOUT_NOTICE,
        "only the notice: no shell job chatter"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
    let inside = ps_inside(backend.as_ref()).await;
    for k in 0..3 {
        assert!(
            !inside.contains(&format!("sleep {}", n + k)),
            "left inside:\n{inside}"
        );
    }
    assert!(wait_until_gone(&format!("sleep {n}"), Duration::from_secs(2)).is_empty());
    backend.close().await.unwrap();
}

pub async fn what_a_finished_command_leaves_running_is_killed(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!("sleep {n} & setsid sleep {} & echo done", n + 1);
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", &script]))
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.stdout.text().as_str()), (Some(0), "done\n"));
    let mut inside = String::new();
    for _ in 0..30 {
        inside = ps_inside(backend.as_ref()).await;
        if !inside.contains(&format!("sleep {n}")) && !inside.contains(&format!("sleep {}", n + 1))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !inside.contains(&format!("sleep {n}")),
        "group leftover:\n{inside}"
    );
    assert!(
        !inside.contains(&format!("sleep {}", n + 1)),
        "setsid leftover:\n{inside}"
    );
    backend.close().await.unwrap();
}

pub async fn background_job_polls_tails_waits_and_is_killed_with_its_tree(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
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
        2,
        Duration::from_millis(50),
    )
    .await;
    assert_eq!(got, b"one\n");
    assert_eq!(backend.poll(&job).await.unwrap().state, JobState::Running);
    let still = backend
        .wait(&job, Some(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(
        still.state,
        JobState::Running,
        "wait with a timeout returns a running job"
    );
    let killed = backend.kill(&job).await.unwrap();
    assert!(
        matches!(killed.state, JobState::Finished { killed: true, .. }),
        "{killed:?}"
    );
    let inside = ps_inside(backend.as_ref()).await;
    assert!(
        !inside.contains(&format!("sleep {n}")),
        "setsid child left:\n{inside}"
    );
    assert!(
        !inside.contains(&format!("sleep {}", n + 1)),
        "main left:\n{inside}"
    );
    let err = backend.read(&job, Stream::Stderr, 0, 100).await.unwrap();
    assert_eq!(err.data, b"two\n");
    assert!(err.complete);

    let quick = backend
        .spawn(&CommandSpec::new([
            "sh",
            "-c",
            "sleep 1; echo done; exit 5",
        ]))
        .await
        .unwrap();
    let s = backend.wait(&quick, None).await.unwrap();
    assert!(
        matches!(
            s.state,
            JobState::Finished {
                exit_code: 5,
                killed: false,
                timed_out: false
            }
        ),
        "{s:?}"
    );
    let out = backend.read(&quick, Stream::Stdout, 0, 100).await.unwrap();
    assert_eq!(out.data, b"done\n");
    assert!(out.complete);

    let timed = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", &format!("sleep {}", n + 2)])
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let s = backend
        .wait(&timed, Some(Duration::from_secs(10)))
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
    assert!(matches!(
        backend.poll(&job).await,
        Err(ExecError::NoSuchJob { .. })
    ));
    backend.close().await.unwrap();
}

pub async fn bad_input_gives_typed_errors(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
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
    let id = JobId::parse(&format!("{}-0011223344556677", "0".repeat(12))).unwrap();
    assert!(matches!(
        backend.poll(&id).await,
        Err(ExecError::NoSuchJob { .. })
    ));
    backend.close().await.unwrap();

    let (config, _s2) = docker_config(engine, |d| d.image = "localhost/not-there:1".into());
    let e = open(&config)
        .await
        .err()
        .expect("an absent image must fail");
    assert!(matches!(e, ExecError::ImageNotFound { .. }), "{e}");

    // A malformed host for the container's relay: refused with the relay's own reason.
    let (config, _s3) = docker_config(engine, |d| {
        d.allow_hosts = vec!["not a host!".into()];
        d.relay_program = Some(nestbox_bin());
    });
    let e = open(&config)
        .await
        .err()
        .expect("a bad allow entry must fail");
    assert!(matches!(e, ExecError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains("--allow"), "{e}");
}

pub async fn large_output_is_bounded_and_spilled_whole(engine: Engine) {
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "head -c 50000000 /dev/zero | tr '\\0' y; echo END >&2",
        ]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout.total_bytes, 50_000_000);
    assert!(r.stdout.truncated);
    assert!(
        r.stdout.head.len() + r.stdout.tail.len() <= 64 * 1024,
        "memory stays bounded"
    );
    let path = r.stdout.full_output.clone().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 50_000_000);
    std::fs::remove_file(path).unwrap();
    assert_eq!(r.stderr.text(), "END\n");
    backend.close().await.unwrap();
}

pub async fn named_volume_bound_to_a_host_path_counts_as_host_exposure(engine: Engine) {
    let host_dir = tempfile::tempdir().unwrap();
    std::fs::write(host_dir.path().join("marker"), "from the host").unwrap();
    let vol = format!("nbtest-{}", nestbox_exec::job::random_token(4));
    let plain = format!("{vol}-plain");
    let sock = engine.socket();
    let api = |method: &str, path: &str, body: Option<String>| {
        let mut c = std::process::Command::new("curl");
        c.args(["-sf", "--unix-socket", &sock, "-X", method]);
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/json", "-d", &b]);
        }
        c.arg(format!("http://engine/v1.41{path}"));
        let out = c.output().unwrap();
        assert!(out.status.success(), "{method} {path} failed");
    };
    api(
        "POST",
        "/volumes/create",
        Some(format!(
            r#"{{"Name":"{vol}","Driver":"local","DriverOpts":{{"type":"none","o":"bind","device":"{}"}}}}"#,
            host_dir.path().display()
        )),
    );
    api(
        "POST",
        "/volumes/create",
        Some(format!(r#"{{"Name":"{plain}"}}"#)),
    );

    let (config, _s) = docker_config(engine, |d| {
        d.reuse = false;
        d.user = Some("root".into());
        d.mounts = vec![format!("{vol}:/data"), format!("{plain}:/scratch")];
    });
    let mut backend = open(&config).await.unwrap();
    let exposure = backend.descriptor().host_exposure.clone();
    assert!(exposure.exposed, "{exposure:?}");
    let hit = exposure
        .paths
        .iter()
        .find(|p| p.target == "/data")
        .expect("the bound volume is listed");
    assert_eq!(hit.host, host_dir.path().display().to_string());
    assert_eq!(hit.via, ExposureSource::NamedVolume { name: vol.clone() });
    assert!(
        !exposure.paths.iter().any(|p| p.target == "/scratch"),
        "a plain volume is not a host path: {exposure:?}"
    );
    // The volume really is the host directory.
    let r = backend
        .run(&CommandSpec::new(["cat", "/data/marker"]))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "from the host");
    backend.close().await.unwrap();

    let bind_dir = tempfile::tempdir().unwrap();
    let (config, _s2) = docker_config(engine, |d| {
        d.reuse = false;
        d.mounts = vec![format!("{}:/src:ro", bind_dir.path().display())];
    });
    let mut backend = open(&config).await.unwrap();
    let exposure = backend.descriptor().host_exposure.clone();
    assert!(exposure.exposed);
    assert!(
        exposure
            .paths
            .iter()
            .any(|p| p.via == ExposureSource::Bind && p.read_only && p.target == "/src")
    );
    backend.close().await.unwrap();
    api("DELETE", &format!("/volumes/{vol}"), None);
    api("DELETE", &format!("/volumes/{plain}"), None);
}

fn container_names(engine: Engine) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sf", "--unix-socket", &engine.socket()])
        .arg("http://engine/v1.41/containers/json?all=1")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn container_of(backend: &dyn Backend) -> String {
    let target = &backend.descriptor().target;
    target
        .split_whitespace()
        .nth(1)
        .expect("container NAME in the target")
        .to_string()
}

pub async fn containers_are_reused_leased_and_reaped(engine: Engine) {
    let state = tempfile::tempdir().unwrap();
    let with_ttl = |ttl: Duration, reuse: bool| {
        let (mut c, _) = docker_config(engine, |d| {
            d.idle_ttl = ttl;
            d.reuse = reuse;
            // A reuse key of this test's own, and one per lease length.
            d.pids_limit = 300 + ttl.as_secs() as i64 % 7;
        });
        c.state_dir = Some(state.path().to_path_buf());
        c
    };
    // Two backends with the same configuration share one warm container.
    let mut a = open(&with_ttl(Duration::from_secs(600), true))
        .await
        .unwrap();
    let mut b = open(&with_ttl(Duration::from_secs(600), true))
        .await
        .unwrap();
    let name = container_of(a.as_ref());
    assert_eq!(name, container_of(b.as_ref()));
    // A job spawned by one is visible to the other (as to a later process).
    let job = a
        .spawn(&CommandSpec::new(["sh", "-c", "echo shared"]))
        .await
        .unwrap();
    let s = b.wait(&job, Some(Duration::from_secs(10))).await.unwrap();
    assert!(s.is_done());
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert!(
        container_names(engine).contains(&name),
        "kept warm while its lease runs"
    );

    let mut again = open(&with_ttl(Duration::from_secs(600), true))
        .await
        .unwrap();
    assert_eq!(
        container_of(again.as_ref()),
        name,
        "an idle container is reused, not duplicated"
    );
    again.close().await.unwrap();

    // Lease expired and nobody holds it: the next prepare in the realm reaps it.
    let mut short = open(&with_ttl(Duration::from_secs(0), true)).await.unwrap();
    let short_name = container_of(short.as_ref());
    assert_ne!(short_name, name);
    short.close().await.unwrap();
    let next = open(&with_ttl(Duration::from_secs(600), false))
        .await
        .unwrap();
    let names = container_names(engine);
    assert!(!names.contains(&short_name), "expired lease, not reaped");
    assert!(names.contains(&name), "a running lease was reaped");

    // A private container whose owner vanished without close() is reaped too.
    let private = container_of(next.as_ref());
    drop(next);
    let mut after = open(&with_ttl(Duration::from_secs(600), false))
        .await
        .unwrap();
    assert!(
        !container_names(engine).contains(&private),
        "owner gone, not reaped"
    );
    let mine = container_of(after.as_ref());
    after.close().await.unwrap();
    assert!(
        !container_names(engine).contains(&mine),
        "a private container outlived close()"
    );
    // Leave nothing: the warm one goes too once its lease is over.
    std::fs::write(
        state.path().join(format!("docker-leases/{name}.lease")),
        r#"{"expires_at":0,"reuse":true}"#,
    )
    .unwrap();
    let mut last = open(&with_ttl(Duration::from_secs(600), false))
        .await
        .unwrap();
    last.close().await.unwrap();
    assert!(!container_names(engine).contains(&name));
}

pub async fn read_only_root_still_runs_jobs(engine: Engine) {
    let (config, _s) = docker_config(engine, |d| {
        d.read_only_rootfs = true;
        d.reuse = false;
    });
    let mut backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "touch /etc/x 2>/dev/null && echo writable || echo readonly",
        ]))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "readonly\n");
    let job = backend
        .spawn(&CommandSpec::new(["echo", "ok"]))
        .await
        .unwrap();
    backend
        .wait(&job, Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(
        backend
            .read(&job, Stream::Stdout, 0, 10)
            .await
            .unwrap()
            .data,
        b"ok\n"
    );
    backend.close().await.unwrap();
}

pub async fn allowed_hosts_are_reached_through_the_relay_and_nothing_else(engine: Engine) {
    use nestbox_testkit::http::{Body, HttpServer};
    let allowed = HttpServer::start("127.0.0.2:0", Body::Text("through the relay".into()));
    let other = HttpServer::start("127.0.0.3:0", Body::Text("must not be reached".into()));
    let (config, _s) = docker_config(engine, |d| {
        d.allow_hosts = vec![format!("127.0.0.2:{}", allowed.port())];
        d.relay_program = Some(nestbox_bin());
    });
    let mut backend = open(&config).await.unwrap();
    let fetch = |url: String, extra: &'static str| {
        CommandSpec::new([
            "sh",
            "-c",
            &format!("wget {extra} -q -O - {url} 2>&1; true"),
        ])
    };
    let r = backend.run(&fetch(allowed.url(), "")).await.unwrap();
    assert_eq!(r.stdout.text(), "through the relay", "{}", r.stderr.text());
    // Not on the list: the relay's refusal.
    let r = backend.run(&fetch(other.url(), "")).await.unwrap();
    assert!(r.stdout.text().contains("403"), "{}", r.stdout.text());
    // Around the proxy: the container's namespace holds only lo.
    let r = backend.run(&fetch(allowed.url(), "-Y off")).await.unwrap();
    assert!(
        r.stdout.text().contains("can't connect"),
        "{}",
        r.stdout.text()
    );
    assert_eq!(other.requests(), 0);
    assert_eq!(allowed.requests(), 1);
    backend.close().await.unwrap();

    // Control: without allow_hosts the same container has no network and no proxy.
    let (config, _s) = docker_config(engine, |_| {});
    let mut backend = open(&config).await.unwrap();
    let r = backend.run(&fetch(allowed.url(), "")).await.unwrap();
    assert!(
        r.stdout.text().contains("can't connect"),
        "{}",
        r.stdout.text()
    );
    backend.close().await.unwrap();
    assert_eq!(allowed.requests(), 1);
}

macro_rules! engine_tests {
    ($module:ident, $engine:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn run_reports_exit_code_streams_and_the_hardening() {
                super::run_reports_exit_code_streams_and_the_hardening($engine).await
            }
            #[tokio::test]
            async fn environment_values_never_appear_on_a_command_line() {
                super::environment_values_never_appear_on_a_command_line($engine).await
            }
            #[tokio::test]
            async fn timeout_kills_the_whole_tree_inside_the_container() {
                super::timeout_kills_the_whole_tree_inside_the_container($engine).await
            }
            #[tokio::test]
            async fn background_job_polls_tails_waits_and_is_killed_with_its_tree() {
                super::background_job_polls_tails_waits_and_is_killed_with_its_tree($engine).await
            }
            #[tokio::test]
            async fn what_a_finished_command_leaves_running_is_killed() {
                super::what_a_finished_command_leaves_running_is_killed($engine).await
            }
            #[tokio::test]
            async fn bad_input_gives_typed_errors() {
                super::bad_input_gives_typed_errors($engine).await
            }
            #[tokio::test]
            async fn large_output_is_bounded_and_spilled_whole() {
                super::large_output_is_bounded_and_spilled_whole($engine).await
            }
            #[tokio::test]
            async fn named_volume_bound_to_a_host_path_counts_as_host_exposure() {
                super::named_volume_bound_to_a_host_path_counts_as_host_exposure($engine).await
            }
            #[tokio::test]
            async fn containers_are_reused_leased_and_reaped() {
                super::containers_are_reused_leased_and_reaped($engine).await
            }
            #[tokio::test]
            async fn allowed_hosts_are_reached_through_the_relay_and_nothing_else() {
                super::allowed_hosts_are_reached_through_the_relay_and_nothing_else($engine).await
            }
            #[tokio::test]
            async fn read_only_root_still_runs_jobs() {
                super::read_only_root_still_runs_jobs($engine).await
            }
        }
    };
}

engine_tests!(dockerd, Engine::Dockerd);
engine_tests!(podman, Engine::Podman);
