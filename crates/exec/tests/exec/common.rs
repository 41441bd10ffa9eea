//! Helpers shared by the exec integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nestbox_exec::{ExecConfig, OutputLimits};

/// The `nestbox` executable: `NESTBOX_BIN`, else the one cargo built next to this test, else
/// built now (`cargo test -p nestbox-exec` alone does not build other packages' binaries).
pub fn nestbox_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("NESTBOX_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let candidate = profile_dir.join("nestbox");
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args(["build", "--quiet", "-p", "nestbox", "--bin", "nestbox"])
            .status()
            .expect("running cargo build for the nestbox binary");
        assert!(status.success(), "cargo build -p nestbox failed");
        assert!(
            candidate.is_file(),
            "no nestbox binary at {}",
            candidate.display()
        );
        candidate
    })
    .clone()
}

/// A configuration with a private state directory (kept alive by the returned guard).
pub fn config_with_state(backend: nestbox_exec::BackendConfig) -> (ExecConfig, tempfile::TempDir) {
    let state = tempfile::tempdir().expect("state dir");
    let config = ExecConfig {
        backend,
        output: OutputLimits::default(),
        state_dir: Some(state.path().to_path_buf()),
    };
    (config, state)
}

/// PIDs of host processes whose command line contains `needle`.
pub fn host_processes_with(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Waits up to `limit` for no host process to carry `needle` in its command line.
pub fn wait_until_gone(needle: &str, limit: Duration) -> Vec<(u32, String)> {
    let start = Instant::now();
    loop {
        let left = host_processes_with(needle);
        if left.is_empty() || start.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A number unlikely to be in any other process's command line (for `sleep N` markers).
pub fn unique_seconds() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = 70_000 + (std::process::id() as u64 % 1000) * 100;
    base + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A value for a forwarded variable that no command line may ever contain.
pub fn secret_value() -> String {
    format!("nb-secret-{}", nestbox_exec::job::random_token(8))
}

/// Asserts that none of the `count` markers `sleep n`, `sleep n+1`, ... is still running on this
/// host within `limit`; `failure` heads the message that lists the leftovers.
pub fn assert_sleeps_gone(n: u64, count: u64, limit: Duration, failure: &str) {
    for k in 0..count {
        let left = wait_until_gone(&format!("sleep {}", n + k), limit);
        assert!(left.is_empty(), "{failure}: {left:?}");
    }
}

/// Runs a tree built to outlive a naive kill (a background child, a `setsid` escapee and a child
/// that ignores SIGTERM) under `timeout`, and asserts the timeout is reported and ends all three;
/// `failure` heads the message that lists the leftovers.
pub async fn assert_timeout_kills_stubborn_tree(
    backend: &dyn nestbox_exec::Backend,
    timeout: Duration,
    failure: &str,
) {
    let n = unique_seconds();
    let script = format!(
        "sleep {n} & setsid sleep {} & (trap '' TERM; exec sleep {}) & echo started; wait",
        n + 1,
        n + 2
    );
    let r = backend
        .run(&nestbox_exec::CommandSpec::new(["sh", "-c", &script]).timeout(timeout))
        .await
        .unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, Some(124));
    assert_eq!(r.stdout.text(), "started\n");
    assert_sleeps_gone(n, 3, Duration::from_secs(5), failure);
}

/// Tails `stream` of `job` by offsets, `piece` bytes per read, until exactly `want` has arrived
/// (or 50 reads `pause` apart have passed); returns what was read.
pub async fn tail_until(
    backend: &dyn nestbox_exec::Backend,
    job: &nestbox_exec::JobId,
    stream: nestbox_exec::Stream,
    want: &[u8],
    piece: usize,
    pause: Duration,
) -> Vec<u8> {
    let mut got = Vec::new();
    let mut offset = 0;
    for _ in 0..50 {
        let chunk = backend.read(job, stream, offset, piece).await.unwrap();
        got.extend_from_slice(&chunk.data);
        offset = chunk.next_offset;
        if got == want {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    got
}
