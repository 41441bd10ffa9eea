//! `nestbox mcp` driven by a real MCP client nobody here wrote (the official Python SDK,
//! `mcp` from PyPI, installed into a venv by scripts/install-test-deps.sh), the raw protocol
//! on its pipes, the example hook, and `nestbox exec` behind the same gate.

mod cli_docs;
mod client;
mod exec_gate;
mod frames;
mod hooks;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `nestbox` binary cargo built for these tests.
pub fn nestbox() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nestbox"))
}

/// The repository root (for `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of the venv that holds the MCP SDK; fails with the install command if absent.
pub fn sdk_python() -> PathBuf {
    let venv = std::env::var_os("NESTBOX_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/nestbox-test-venv")
        });
    let python = venv.join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the MCP Python SDK is not installed in {}: run scripts/install-test-deps.sh",
        venv.display()
    );
    python
}

/// Runs `cmd` to completion with no stdin, failing the test after `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "did not finish within {limit:?}: {cmd:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One step the Python client reported.
pub struct Seen {
    pub step: String,
    pub value: serde_json::Value,
}

/// Runs client.py SCENARIO against `nestbox mcp ARGS` in `workdir` and returns what it saw.
pub fn python_client(scenario: &str, workdir: &Path, args: &[&str]) -> Vec<Seen> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let out = output_within(
        Command::new(sdk_python())
            .arg(script)
            .arg(scenario)
            .arg(nestbox())
            .args(args)
            .current_dir(workdir),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the MCP client failed ({:?})\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("client output is JSON");
            Seen {
                step: v["step"].as_str().unwrap().to_string(),
                value: v["value"].clone(),
            }
        })
        .collect()
}

/// The value of the first step named `name`.
pub fn step<'a>(seen: &'a [Seen], name: &str) -> &'a serde_json::Value {
    &seen
        .iter()
        .find(|s| s.step == name)
        .unwrap_or_else(|| panic!("no step {name}"))
        .value
}
