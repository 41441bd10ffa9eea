//! The gateway as a user runs it (`nestbox gateway` as its own process), a TLS server with its
//! own test CA standing in for the API, and caged steps started with `nestbox run --gateway`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use nestbox_testkit::tls_api::ApiServer;

use crate::common::{nestbox_bin, output_within};

/// The name the test server stands in for; the gateway resolves it to 127.0.0.1.
pub const API: &str = "api.anthropic.com";
/// The secret the gateway holds. Tests grep for it everywhere it must not be.
pub const SECRET: &str = "sk-ant-test-5ecret-value-0042";
/// What a step holds instead.
pub const PLACEHOLDER: &str = "nestbox:resolve:env:ANTHROPIC_API_KEY";

/// A gateway policy for `api`: workers may reach it inspected, the key is bound to `/v1/**`
/// for cell `worker`. `extra` is appended.
pub fn worker_policy(api: &ApiServer, extra: &str) -> String {
    format!(
        r#"[gateway]
upstream_ca = ["{ca}"]

[[rule]]
name = "workers reach the API"
cell = "worker"
hosts = ["{API}"]
ports = [{port}]
tls = "inspect"
addresses = ["127.0.0.1"]

[[credential]]
name = "ANTHROPIC_API_KEY"
env = "GATEWAY_ANTHROPIC_KEY"
endpoints = [{{ host = "{API}", port = {port}, path = "/v1/**" }}]
callers = [{{ cell = "worker" }}]
{extra}"#,
        ca = api.ca.display(),
        port = api.port
    )
}

/// A running `nestbox gateway`.
pub struct Gateway {
    child: Option<Child>,
    /// Its proxy port on 127.0.0.1.
    pub port: u16,
    /// Its state directory.
    pub state: PathBuf,
    /// Its policy file.
    pub policy: PathBuf,
    /// Its audit log.
    pub audit: PathBuf,
    /// Its stderr.
    pub log: PathBuf,
    /// A scratch directory (working directory of steps).
    pub work: tempfile::TempDir,
}

/// The real clients the tests use: a missing one fails the test with the command that installs
/// it, never skips it.
fn need_tools() {
    for (path, package) in [
        ("/usr/bin/curl", "curl"),
        ("/usr/bin/python3", "python3"),
        ("/usr/bin/openssl", "openssl"),
    ] {
        assert!(
            Path::new(path).exists(),
            "{path} is needed by the gateway tests: apt-get install -y {package} (or run scripts/install-test-deps.sh)"
        );
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Gateway {
    /// Starts a gateway with `policy`, the secret in its environment, `api.anthropic.com` (and
    /// `other.test`) answered as 127.0.0.1; waits until it serves.
    pub fn start(policy: &str) -> Gateway {
        Gateway::try_start(policy, &[("GATEWAY_ANTHROPIC_KEY", SECRET)])
            .unwrap_or_else(|log| panic!("the gateway did not start:\n{log}"))
    }

    /// Starts a gateway with `env`; `Err(its stderr)` when it exits instead of serving.
    pub fn try_start(policy: &str, env: &[(&str, &str)]) -> Result<Gateway, String> {
        need_tools();
        let work = tempfile::Builder::new()
            .prefix("nestbox-gw-test-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(
            work.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let policy_path = work.path().join("gateway.toml");
        std::fs::write(&policy_path, policy).unwrap();
        let (state, audit, log) = (
            work.path().join("state"),
            work.path().join("audit.jsonl"),
            work.path().join("gateway.log"),
        );
        let port = free_port();
        let mut cmd = Command::new(nestbox_bin());
        cmd.arg("gateway")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--dir")
            .arg(&state)
            .arg("--audit")
            .arg(&audit)
            .args(["--resolve", &format!("{API}=127.0.0.1")])
            .args(["--resolve", "other.test=127.0.0.1"])
            .args(["--poll", "100ms"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok()
                && state.join("control.sock").exists()
            {
                break;
            }
            if let Ok(Some(_)) = child.try_wait() {
                return Err(std::fs::read_to_string(&log).unwrap_or_default());
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the gateway did not listen: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Gateway {
            child: Some(child),
            port,
            state,
            policy: policy_path,
            audit,
            log,
            work,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Replaces the policy file the way an editor does (write aside, rename over).
    pub fn write_policy(&self, text: &str) {
        let aside = self.work.path().join("gateway.toml.new");
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(&aside, &self.policy).unwrap();
    }

    /// `nestbox gateway status --json`.
    pub fn status(&self) -> serde_json::Value {
        let out = output_within(
            Command::new(nestbox_bin())
                .args(["gateway", "status", "--json", "--dir"])
                .arg(&self.state),
            Duration::from_secs(10),
        );
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The gateway's stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The audit lines so far.
    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `nestbox run --gateway URL --gateway-dir STATE <extra> -- <cmd>` in the scratch dir.
    pub fn run(&self, extra: &[&str], cmd: &[&str]) -> Output {
        output_within(&mut self.run_cmd(extra, cmd), Duration::from_secs(60))
    }

    /// The command [`Gateway::run`] runs, not yet started.
    pub fn run_cmd(&self, extra: &[&str], cmd: &[&str]) -> Command {
        let mut c = Command::new(nestbox_bin());
        c.arg("run")
            .arg("--workdir")
            .arg(self.work.path())
            .arg("--gateway")
            .arg(self.url())
            .arg("--gateway-dir")
            .arg(&self.state)
            .args(extra)
            .arg("--")
            .args(cmd);
        c
    }

    /// The gateway's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Sends a signal to the gateway.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
    }

    /// Kills the gateway and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A curl command line for a caged step: the response's status and `X-Nestbox-Denied`, then
/// its body, on stdout.
pub fn curl(url: &str, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "/usr/bin/curl",
        "-sS",
        "-o",
        "-",
        "-w",
        "\n%{http_code} [%header{x-nestbox-denied}]\n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(args.iter().map(|s| s.to_string()));
    v.push(url.to_string());
    v
}

/// `https://api.anthropic.com:PORT{path}`.
pub fn api_url(api: &ApiServer, path: &str) -> String {
    format!("https://{API}:{}{path}", api.port)
}

/// Every file below `dir`, for the secret greps.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_below(&p)),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
    out
}

/// Waits until `f` holds, failing after `limit`.
pub fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The args of a caged `curl` call as `&str`s.
pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
