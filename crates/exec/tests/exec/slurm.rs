//! The Slurm backend against a real single-node cluster (munged, slurmctld, slurmd) started by
//! scripts/services/slurm-up.sh: real jobs through srun and sbatch, real scancel, real process
//! tracking. The cage runs on the "compute node" (this machine) through the nestbox binary.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nestbox_exec::{
    BackendConfig, CommandSpec, ExecConfig, ExecError, Isolation, JobState, SlurmConfig, Stream,
    open,
};

use crate::common::*;

struct Cluster {
    conf: PathBuf,
    partition: String,
    jobs: PathBuf,
}

fn cluster() -> Cluster {
    let file = std::fs::read_to_string("/run/nestbox-test/slurm.env").unwrap_or_default();
    let get = |name: &str| {
        std::env::var(name).ok().or_else(|| {
            file.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_string)
        })
    };
    let (Some(conf), Some(partition), Some(jobs)) = (
        get("NESTBOX_TEST_SLURM_CONF"),
        get("NESTBOX_TEST_SLURM_PARTITION"),
        get("NESTBOX_TEST_SLURM_JOBS"),
    ) else {
        panic!(
            "the test Slurm cluster is not running (no NESTBOX_TEST_SLURM_* and no \
             /run/nestbox-test/slurm.env): start it with scripts/services/slurm-up.sh \
             (scripts/test.sh does this for you)"
        );
    };
    assert!(
        std::path::Path::new(&conf).is_file(),
        "{conf} is missing: restart the cluster with scripts/services/slurm-up.sh"
    );
    Cluster {
        conf: conf.into(),
        partition,
        jobs: jobs.into(),
    }
}

/// A configuration for the test cluster, caged with the nestbox binary under test.
fn slurm_config(f: impl FnOnce(&mut SlurmConfig)) -> (ExecConfig, tempfile::TempDir) {
    let c = cluster();
    let mut s = SlurmConfig {
        partition: Some(c.partition),
        slurm_conf: Some(c.conf),
        jobs_dir: Some(c.jobs.join(format!("t{}", std::process::id()))),
        workdir: Some("/tmp".into()),
        cage: true,
        launcher: Some(nestbox_bin().display().to_string()),
        ..SlurmConfig::default()
    };
    f(&mut s);
    config_with_state(BackendConfig::Slurm(s))
}

/// What the scheduler says about a Slurm job id.
fn scheduler_state(conf: &std::path::Path, id: &str) -> String {
    let out = std::process::Command::new("scontrol")
        .args(["show", "job", "-o", id])
        .env("SLURM_CONF", conf)
        .output()
        .expect("scontrol");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or("unknown")
        .to_string()
}

#[tokio::test]
async fn slurm_run_reports_the_exact_exit_code_and_keeps_streams_apart() {
    let (config, _s) = slurm_config(|c| c.cage = false);
    let backend = open(&config).await.unwrap();
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(7));
    assert_eq!(r.stdout.text(), "out\n");
    assert_eq!(r.stderr.text(), "err\n");
    assert!(!r.timed_out);
    let r = backend
        .run(&CommandSpec::new(["sh", "-c", "kill -9 $$"]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(137), "death by SIGKILL is 128+9");
    let r = backend
        .run(&CommandSpec::new(["pwd"]).workdir("/var"))
        .await
        .unwrap();
    assert_eq!(r.stdout.text(), "/var\n");
}

#[tokio::test]
async fn slurm_steps_run_in_the_cage_on_the_compute_node() {
    let (config, _s) = slurm_config(|_| {});
    let backend = open(&config).await.unwrap();
    assert_eq!(backend.descriptor().isolation, Isolation::Cage);
    let r = backend
        .run(&CommandSpec::new([
            "sh",
            "-c",
            "grep NoNewPrivs /proc/self/status; echo x > /etc/nestbox-escape || echo refused",
        ]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.text());
    assert!(
        r.stdout.text().contains("NoNewPrivs:\t1"),
        "{}",
        r.stdout.text()
    );
    assert!(r.stdout.text().contains("refused"), "{}", r.stdout.text());
    assert!(!std::path::Path::new("/etc/nestbox-escape").exists());
}

#[tokio::test]
async fn slurm_refuses_to_run_uncaged_when_nestbox_is_missing_on_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let (config, _s) = slurm_config(|c| c.launcher = Some("/nonexistent/nestbox".into()));
    let backend = open(&config).await.unwrap();
    let e = backend
        .run(&CommandSpec::new(["touch", &marker.display().to_string()]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ExecError::Refused { message, .. } if message.contains("not installed on node")),
        "{e}"
    );
    assert!(!marker.exists(), "the command ran uncaged");
    let job = backend
        .spawn(&CommandSpec::new(["touch", &marker.display().to_string()]))
        .await
        .unwrap();
    let s = backend
        .wait(&job, Some(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(
        matches!(
            s.state,
            JobState::Finished { exit_code: 125, .. } | JobState::Lost
        ),
        "{s:?}"
    );
    assert!(!marker.exists(), "the background job ran uncaged");
}

#[tokio::test]
async fn slurm_refuses_a_missing_working_directory_instead_of_running_in_tmp() {
    let (config, _s) = slurm_config(|c| c.cage = false);
    let backend = open(&config).await.unwrap();
    let e = backend
        .run(&CommandSpec::new(["pwd"]).workdir("/nonexistent/dir"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ExecError::Refused { message, .. } if message.contains("/nonexistent/dir")),
        "{e}"
    );
    let e = backend
        .run(&CommandSpec::new(["no-such-program-nb"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
}

#[tokio::test]
async fn slurm_forwards_environment_values_without_putting_them_on_a_command_line() {
    let (config, _s) = slurm_config(|_| {});
    let backend = open(&config).await.unwrap();
    let secret = secret_value();
    let job = backend
        .spawn(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; sleep 2"])
                .env("NB_TOKEN", secret.clone()),
        )
        .await
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        assert!(
            host_processes_with(&secret).is_empty(),
            "a command line carries the value"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = backend
        .wait(&job, Some(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(
        matches!(s.state, JobState::Finished { exit_code: 0, .. }),
        "{s:?}"
    );
    let out = backend.read(&job, Stream::Stdout, 0, 4096).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.data), secret);
    backend.forget(&job).await.unwrap();
}

#[tokio::test]
async fn slurm_timeout_kills_the_whole_tree_including_setsid_and_sigterm_ignoring_children() {
    let (config, _s) = slurm_config(|c| c.cage = false);
    let backend = open(&config).await.unwrap();
    assert_timeout_kills_stubborn_tree(
        backend.as_ref(),
        Duration::from_secs(2),
        "left on the node",
    )
    .await;
}

#[tokio::test]
async fn slurm_kill_ends_a_tree_that_ignores_sigterm_and_calls_setsid() {
    let (config, _s) = slurm_config(|c| c.cage = false);
    let cluster_conf = cluster().conf;
    let backend = open(&config).await.unwrap();
    let n = unique_seconds();
    let script = format!(
        "sleep {n} & setsid sleep {} & (trap '' TERM; exec sleep {}) & echo up; wait",
        n + 1,
        n + 2
    );
    let job = backend
        .spawn(&CommandSpec::new(["sh", "-c", &script]))
        .await
        .unwrap();
    let start = Instant::now();
    while host_processes_with(&format!("sleep {}", n + 2)).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the job never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = backend.kill(&job).await.unwrap();
    let JobState::Finished {
        exit_code, killed, ..
    } = s.state
    else {
        panic!("{s:?}")
    };
    assert!(killed);
    assert_ne!(exit_code, 0, "a killed job is not a success");
    assert_sleeps_gone(n, 3, Duration::from_secs(2), "survived scancel");
    let slurm_id = job.as_str().split('.').next().unwrap();
    assert_eq!(scheduler_state(&cluster_conf, slurm_id), "CANCELLED");
    backend.forget(&job).await.unwrap();
}

#[tokio::test]
async fn slurm_job_cancelled_outside_nestbox_is_reported_killed_not_successful() {
    let (config, _s) = slurm_config(|c| c.cage = false);
    let conf = cluster().conf;
    let backend = open(&config).await.unwrap();
    let job = backend
        .spawn(&CommandSpec::new(["sh", "-c", "echo started; sleep 600"]))
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        let c = backend.read(&job, Stream::Stdout, 0, 100).await.unwrap();
        if !c.data.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the job never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let slurm_id = job.as_str().split('.').next().unwrap();
    let st = std::process::Command::new("scancel")
        .arg(slurm_id)
        .env("SLURM_CONF", &conf)
        .status()
        .unwrap();
    assert!(st.success());
    let s = backend
        .wait(&job, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    let JobState::Finished {
        exit_code, killed, ..
    } = s.state
    else {
        panic!("{s:?}")
    };
    assert!(killed, "{s:?}");
    assert!(
        exit_code > 128,
        "exit {exit_code}: a cancelled job must not look like success"
    );
    backend.forget(&job).await.unwrap();
}

#[tokio::test]
async fn slurm_background_jobs_are_polled_read_by_offset_and_waited_for() {
    let (config, _s) = slurm_config(|_| {});
    let backend = open(&config).await.unwrap();
    let job = backend
        .spawn(&CommandSpec::new([
            "sh",
            "-c",
            "printf 0123456789; echo e >&2; sleep 1; printf abc; exit 4",
        ]))
        .await
        .unwrap();
    assert!(
        job.as_str()
            .split('.')
            .next()
            .unwrap()
            .parse::<u64>()
            .is_ok(),
        "{job}"
    );
    let s = backend
        .wait(&job, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        s.state,
        JobState::Finished {
            exit_code: 4,
            timed_out: false,
            killed: false
        }
    );
    assert_eq!((s.stdout_bytes, s.stderr_bytes), (13, 2));
    let c = backend.read(&job, Stream::Stdout, 4, 3).await.unwrap();
    assert_eq!(
        (c.data.as_slice(), c.next_offset, c.complete),
        (&b"456"[..], 7, false)
    );
    let c = backend.read(&job, Stream::Stdout, 7, 100).await.unwrap();
    assert_eq!((c.data.as_slice(), c.complete), (&b"789abc"[..], true));
    let c = backend.read(&job, Stream::Stderr, 0, 100).await.unwrap();
    assert_eq!(c.data, b"e\n");
    // Another process (a new backend) finds the job by its id.
    let again = open(&config).await.unwrap();
    assert_eq!(again.poll(&job).await.unwrap().state, s.state);
    again.forget(&job).await.unwrap();
    assert!(matches!(
        again.poll(&job).await,
        Err(ExecError::NoSuchJob { .. })
    ));
}

#[tokio::test]
async fn slurm_many_jobs_at_once_each_report_their_own_exit_code() {
    let (config, _s) = slurm_config(|c| c.cage = false);
    let backend = open(&config).await.unwrap();
    let mut jobs = Vec::new();
    for k in 0..8 {
        let job = backend
            .spawn(&CommandSpec::new([
                "sh",
                "-c",
                &format!("echo job{k}; exit {k}"),
            ]))
            .await
            .unwrap();
        jobs.push((k, job));
    }
    let runs = (0..4).map(|k| {
        let cmd = CommandSpec::new(["sh", "-c", &format!("exit {}", 10 + k)]);
        let backend = &backend;
        async move { backend.run(&cmd).await.unwrap().exit_code }
    });
    let codes = futures_util::future::join_all(runs).await;
    assert_eq!(codes, vec![Some(10), Some(11), Some(12), Some(13)]);
    for (k, job) in jobs {
        let s = backend
            .wait(&job, Some(Duration::from_secs(120)))
            .await
            .unwrap();
        assert!(
            matches!(s.state, JobState::Finished { exit_code, .. } if exit_code == k),
            "job {k}: {s:?}"
        );
        let out = backend.read(&job, Stream::Stdout, 0, 100).await.unwrap();
        assert_eq!(out.data, format!("job{k}\n").into_bytes());
        backend.forget(&job).await.unwrap();
    }
}
