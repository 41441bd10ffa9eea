//! Shared helpers for the integration tests: a scratch working directory holding the probe
//! script, running `nestbox run` on it, and running the same probe outside as the control.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PYTHON: &str = "/usr/bin/python3";
const PROBE: &str = include_str!("../probes/probe.py");

pub fn nestbox_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nestbox"))
}

pub fn is_root() -> bool {
    // SAFETY: trivial getter.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a command to completion, killing it and failing the test if it takes longer than
/// `limit` (a hung cage must fail CI, not stall it).
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().expect("try_wait") {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "command did not finish within {limit:?}: {cmd:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch working directory for one test, with the probe script in it.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("nestbox-test-")
            .tempdir()
            .expect("tempdir");
        // World-writable so the unprivileged runs (setpriv to nobody) can use it too.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(dir.path().join("probe.py"), PROBE).unwrap();
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `nestbox run --workdir <scratch> <extra...> -- <cmd...>`, not yet started.
    pub fn nestbox(&self, extra: &[&str], cmd: &[&str]) -> Command {
        let mut c = Command::new(nestbox_bin());
        c.arg("run").arg("--workdir").arg(self.path());
        c.args(extra).arg("--").args(cmd);
        c
    }

    /// Runs the probe inside the cage and returns its one-line answer.
    pub fn probe_inside(&self, extra: &[&str], probe: &[&str]) -> String {
        let mut cmd = vec![PYTHON, "probe.py"];
        cmd.extend_from_slice(probe);
        let out = output_within(&mut self.nestbox(extra, &cmd), Duration::from_secs(60));
        answer(&out)
    }

    /// Runs the same probe outside any cage: the control case.
    pub fn probe_outside(&self, probe: &[&str]) -> String {
        let mut c = Command::new(PYTHON);
        c.arg(self.path().join("probe.py"))
            .args(probe)
            .current_dir(self.path());
        answer(&output_within(&mut c, Duration::from_secs(60)))
    }
}

fn answer(out: &Output) -> String {
    let s = stdout(out);
    let line = s.lines().last().unwrap_or("").trim().to_string();
    assert!(
        line == "OK" || line.starts_with("ERR "),
        "probe gave no answer (status {:?})\nstdout: {s}\nstderr: {}",
        out.status.code(),
        stderr(out)
    );
    line
}

/// A process outside any cage that the tests attack (signal, ptrace, environ). Killed on drop.
pub struct Victim {
    pub child: std::process::Child,
}

impl Victim {
    pub fn sleeping() -> Victim {
        let child = Command::new("/bin/sleep")
            .arg("300")
            .env("NESTBOX_TEST_VICTIM_SECRET", "victim-secret-value")
            .spawn()
            .expect("spawn victim");
        Victim { child }
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a pid is alive (not a zombie) right now.
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let after = &s[s.rfind(')').unwrap() + 1..];
            !after.trim_start().starts_with('Z')
        }
        Err(_) => false,
    }
}

/// Host pids of live processes whose whole command line is `marker` (e.g. `sleep 7001000`;
/// the launcher's own command line, which holds it inside a script, does not count).
pub fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == marker)
                .unwrap_or(false)
        })
        .filter(|&pid| pid_alive(pid))
        .collect()
}

/// A `sleep` duration unique to this test run (about 900 s), to find its processes from
/// outside by their exact command line.
pub fn unique_sleep() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "900.{}{:03}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}
