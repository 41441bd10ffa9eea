//! The Apptainer backend against a STAND-IN `apptainer` (Apptainer cannot be installed here):
//! a shell script, written by these tests, that records every call and runs the command on the
//! host with a clean environment plus the env file, like `exec --cleanenv --env-file` would.
//! What this verifies is nestbox's side: flags, lookup order, env file, cache, timeouts, jobs.
//! It does not verify Apptainer itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nestbox_exec::{
    ApptainerConfig, BackendConfig, CommandSpec, ExecConfig, ExecError, JobState, Stream, open,
};

use crate::common::*;

/// A directory holding a stand-in named `name`, and the log it appends its arguments to.
struct StandIn {
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl StandIn {
    fn new(names: &[&str]) -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.log");
        let script = format!(
            r#"#!/bin/sh
# Stand-in for apptainer/singularity (nestbox tests). Records each call, one per line.
printf '%s\n' "$(basename "$0") $*" >> '{log}'
case "$1" in
version) echo "apptainer version 1.3.6-standin"; exit 0 ;;
build)
  case "$3" in *missing*) echo "FATAL: unable to fetch $3" >&2; exit 255 ;; esac
  head -c "${{STANDIN_SIF_BYTES:-1000}}" /dev/zero > "$2"; exit 0 ;;
exec)
  shift; envf=/dev/null; pwd=/
  while [ $# -gt 0 ]; do
    case "$1" in
    --env-file) envf=$2; shift 2 ;;
    --pwd) pwd=$2; shift 2 ;;
    --bind|-B|--drop-caps) shift 2 ;;
    --*) shift ;;
    *) break ;;
    esac
  done
  [ -f "$1" ] || {{ echo "FATAL: could not open image $1" >&2; exit 255; }}
  shift
  command -v "$1" >/dev/null 2>&1 || {{ echo "FATAL:   \"$1\": executable file not found in \$PATH" >&2; exit 255; }}
  exec env -i PATH=/usr/bin:/bin sh -c 'set -a; . "$1"; set +a; cd "$2"; shift 2; exec "$@"' sh "$envf" "$pwd" "$@" ;;
*) echo "stand-in: unsupported $1" >&2; exit 2 ;;
esac
"#,
            log = log.display()
        );
        for name in names {
            let path = dir.path().join(name);
            std::fs::write(&path, &script).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        StandIn { dir, log }
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }
}

fn sif_file(dir: &Path) -> PathBuf {
    let p = dir.join("image.sif");
    std::fs::write(&p, b"SIF").unwrap();
    p
}

fn app_config(
    stand_in: &StandIn,
    f: impl FnOnce(&mut ApptainerConfig),
) -> (ExecConfig, tempfile::TempDir) {
    let mut c = ApptainerConfig {
        image: sif_file(stand_in.dir.path()).display().to_string(),
        search_path: Some(stand_in.path()),
        ..ApptainerConfig::default()
    };
    let (mut config, state) =
        config_with_state(BackendConfig::Apptainer(ApptainerConfig::default()));
    c.scratch_dir = Some(state.path().join("scratch"));
    f(&mut c);
    config.backend = BackendConfig::Apptainer(c);
    (config, state)
}

#[tokio::test]
async fn apptainer_missing_is_unavailable_and_says_where_to_get_it() {
    let empty = tempfile::tempdir().unwrap();
    let (config, _s) = config_with_state(BackendConfig::Apptainer(ApptainerConfig {
        image: "/x.sif".into(),
        search_path: Some(empty.path().display().to_string()),
        ..ApptainerConfig::default()
    }));
    let e = open(&config).await.err().expect("no runtime anywhere");
    assert!(matches!(e, ExecError::Unavailable { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("apptainer") && text.contains("singularity"),
        "{text}"
    );
    assert!(text.contains("apptainer.org"), "{text}");
}

#[tokio::test]
async fn apptainer_is_preferred_and_singularity_is_found_when_alone() {
    let both = StandIn::new(&["apptainer", "singularity"]);
    let (config, _s) = app_config(&both, |_| {});
    let b = open(&config).await.unwrap();
    b.run(&CommandSpec::new(["true"])).await.unwrap();
    assert!(
        both.calls().iter().all(|c| c.starts_with("apptainer ")),
        "{:?}",
        both.calls()
    );

    let only = StandIn::new(&["singularity"]);
    let (config, _s) = app_config(&only, |_| {});
    let b = open(&config).await.unwrap();
    b.run(&CommandSpec::new(["true"])).await.unwrap();
    assert!(
        only.calls()
            .iter()
            .any(|c| c.starts_with("singularity exec ")),
        "{:?}",
        only.calls()
    );
}

#[tokio::test]
async fn apptainer_runs_contained_with_an_env_file_and_separate_streams() {
    let s = StandIn::new(&["apptainer"]);
    let (config, _st) = app_config(&s, |c| c.binds = vec!["/srv/data:/data:ro".into()]);
    let b = open(&config).await.unwrap();
    let secret = secret_value();
    let r = b
        .run(
            &CommandSpec::new(["sh", "-c", "printf %s \"$NB_TOKEN\"; echo err >&2; exit 4"])
                .env("NB_TOKEN", secret.clone())
                .workdir("/tmp"),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(4));
    assert_eq!(r.stdout.text(), secret);
    assert_eq!(r.stderr.text(), "err\n");
    let exec = s
        .calls()
        .into_iter()
        .find(|c| c.starts_with("apptainer exec"))
        .unwrap();
    for flag in [
        "--containall",
        "--no-home",
        "--cleanenv",
        "--drop-caps ALL",
        "--no-privs",
        "--env-file",
        "--pwd /tmp",
        "--bind /srv/data:/data:ro",
    ] {
        assert!(exec.contains(flag), "missing {flag}: {exec}");
    }
    assert!(
        !exec.contains(&secret),
        "the value is on the command line: {exec}"
    );
    let d = b.descriptor();
    assert!(d.host_exposure.exposed);
    assert_eq!(d.cancellation, nestbox_exec::Cancellation::PidNamespace);
    // The env file does not outlive the run.
    let env_dir = config.state_dir.unwrap().join("apptainer-env");
    assert_eq!(std::fs::read_dir(env_dir).unwrap().count(), 0);
}

#[tokio::test]
async fn apptainer_timeout_and_kill_end_the_runtime_process() {
    let s = StandIn::new(&["apptainer"]);
    let (config, _st) = app_config(&s, |_| {});
    let b = open(&config).await.unwrap();
    let n = unique_seconds();
    let r = b
        .run(&CommandSpec::new(["sleep", &n.to_string()]).timeout(Duration::from_millis(500)))
        .await
        .unwrap();
    assert!(r.timed_out);
    assert!(wait_until_gone(&format!("sleep {n}"), Duration::from_secs(3)).is_empty());

    let job = b
        .spawn(&CommandSpec::new([
            "sh",
            "-c",
            &format!("echo up; sleep {}", n + 1),
        ]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.poll(&job).await.unwrap().state, JobState::Running);
    let k = b.kill(&job).await.unwrap();
    assert!(
        matches!(k.state, JobState::Finished { killed: true, .. }),
        "{k:?}"
    );
    assert!(wait_until_gone(&format!("sleep {}", n + 1), Duration::from_secs(3)).is_empty());
    assert_eq!(
        b.read(&job, Stream::Stdout, 0, 10).await.unwrap().data,
        b"up\n"
    );
    b.forget(&job).await.unwrap();
}

#[tokio::test]
async fn apptainer_command_not_found_is_a_typed_error() {
    let s = StandIn::new(&["apptainer"]);
    let (config, _st) = app_config(&s, |_| {});
    let b = open(&config).await.unwrap();
    let e = b
        .run(&CommandSpec::new(["no-such-program"]))
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::CommandNotFound { .. }), "{e}");
}

#[tokio::test]
async fn sif_cache_builds_once_evicts_least_recently_used_and_rebuilds_after_a_purge() {
    let s = StandIn::new(&["apptainer"]);
    let cache = tempfile::tempdir().unwrap();
    let cfg = |image: &str| {
        let (config, st) = app_config(&s, |c| {
            c.image = image.into();
            c.cache_dir = Some(cache.path().to_path_buf());
            c.cache_max_bytes = 2500; // the stand-in builds 1000-byte images: two fit
        });
        (config, st)
    };
    let builds = |s: &StandIn| {
        s.calls()
            .iter()
            .filter(|c| c.starts_with("apptainer build"))
            .count()
    };
    let sifs = || {
        std::fs::read_dir(cache.path())
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "sif"))
            .count()
    };

    let (a, _s1) = cfg("docker://example/a:1");
    open(&a).await.unwrap();
    open(&a).await.unwrap();
    assert_eq!(builds(&s), 1, "built once, then reused");

    let (b, _s2) = cfg("docker://example/b:1");
    open(&b).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    open(&a).await.unwrap(); // a is now more recently used than b
    let (c, _s3) = cfg("docker://example/c:1");
    open(&c).await.unwrap();
    assert_eq!(sifs(), 2, "the cap holds two images");
    assert_eq!(builds(&s), 3);
    open(&a).await.unwrap();
    assert_eq!(builds(&s), 3, "a survived (recently used)");
    open(&b).await.unwrap();
    assert_eq!(
        builds(&s),
        4,
        "b was evicted (least recently used) and is built again"
    );

    // A purge deletes the files behind the cache's back: noticed, and rebuilt.
    for e in std::fs::read_dir(cache.path()).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "sif") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let (a2, _s4) = cfg("docker://example/a:1");
    let backend = open(&a2).await.unwrap();
    assert_eq!(builds(&s), 5, "rebuilt after the purge");
    backend.run(&CommandSpec::new(["true"])).await.unwrap();

    let (bad, _s5) = cfg("docker://example/missing:1");
    let e = open(&bad).await.err().expect("a failed build refuses");
    assert!(matches!(e, ExecError::ImageNotFound { .. }), "{e}");
}

#[tokio::test]
async fn scratch_falls_back_to_the_state_directory_without_a_writable_scratch() {
    let s = StandIn::new(&["apptainer"]);
    let (mut config, state) = app_config(&s, |c| c.image = "docker://example/s:1".into());
    if let BackendConfig::Apptainer(c) = &mut config.backend {
        c.scratch_dir = None;
    }
    open(&config).await.unwrap();
    if Path::new("/scratch").is_dir() {
        // A machine with its own /scratch: the cache rightly went there instead.
        return;
    }
    let cache = state.path().join("apptainer/sif");
    assert!(std::fs::read_dir(cache).unwrap().count() > 0);
}
