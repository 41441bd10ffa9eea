//! Running things on this machine, for the backends whose sandbox starts here (local: the cage
//! launcher; apptainer: the `apptainer` client): a foreground child with both streams captured
//! and a deadline, the [`Transport`] that runs the job supervisor with `/bin/sh`, and private
//! files for forwarded variables.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::backend::{BackendKind, BoxFuture};
use crate::error::{ExecError, Result};
use crate::job::{CallOutput, Transport};
use crate::output::{Capture, CapturedOutput, OutputLimits};
use crate::supervisor;

/// Writes `bytes` to a new file (never an existing one) that only its owner can read: the
/// forwarded variables a job reads at start-up wait there, and other users of this machine
/// must not see them.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ExecError::io(format!("creating {}", path.display()), e))?;
    std::io::Write::write_all(&mut f, bytes)
        .map_err(|e| ExecError::io(format!("writing {}", path.display()), e))
}

/// Sends SIGTERM to a child that is dropped before it was reaped (a caller that gave up on the
/// future), so the launcher it is can take its tree down instead of leaving it running.
struct TermOnDrop {
    pid: Option<i32>,
}

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            // SAFETY: plain kill(2) on the child's PID, which tokio has not reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// How a foreground child ended.
pub(crate) struct ChildEnd {
    pub code: Option<i32>,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    /// True when *our* deadline passed and we had to signal the child.
    pub deadline_hit: bool,
}

fn exit_code(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s))
}

async fn drain(mut from: impl AsyncRead + Unpin, into: Arc<Mutex<Capture>>) -> Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| ExecError::io("reading the command's output", e))?;
        if n == 0 {
            return Ok(());
        }
        into.lock().expect("capture lock").push(&buf[..n])?;
    }
}

/// Runs `cmd` to its end with both streams captured. When `deadline` passes, the child gets
/// SIGTERM, then SIGKILL after `grace`; output read until then is kept.
pub(crate) async fn run_child(
    kind: BackendKind,
    mut cmd: tokio::process::Command,
    deadline: Option<Duration>,
    grace: Duration,
    limits: &OutputLimits,
    spill_dir: &Path,
) -> Result<ChildEnd> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        ExecError::io(
            format!("{kind} backend: starting {:?}", cmd.as_std().get_program()),
            e,
        )
    })?;
    let mut guard = TermOnDrop {
        pid: child.id().map(|p| p as i32),
    };
    let out = Arc::new(Mutex::new(Capture::new(
        limits,
        spill_dir,
        &format!("{kind}-stdout"),
    )));
    let err = Arc::new(Mutex::new(Capture::new(
        limits,
        spill_dir,
        &format!("{kind}-stderr"),
    )));
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let (o, e) = (out.clone(), err.clone());
    let mut work = std::pin::pin!(async move {
        let (r1, r2, status) = tokio::join!(drain(stdout, o), drain(stderr, e), child.wait());
        r1?;
        r2?;
        status.map_err(|e| ExecError::io("waiting for the command", e))
    });

    let mut deadline_hit = false;
    let status = match deadline {
        None => Some(work.as_mut().await?),
        Some(d) => match tokio::time::timeout(d, work.as_mut()).await {
            Ok(r) => Some(r?),
            Err(_) => {
                deadline_hit = true;
                let pid = guard.pid.take();
                signal(pid, libc::SIGTERM);
                match tokio::time::timeout(grace, work.as_mut()).await {
                    Ok(r) => Some(r?),
                    Err(_) => {
                        signal(pid, libc::SIGKILL);
                        // Pipes held by escaped grandchildren must not hold the caller forever.
                        match tokio::time::timeout(Duration::from_secs(2), work.as_mut()).await {
                            Ok(r) => Some(r?),
                            Err(_) => None,
                        }
                    }
                }
            }
        },
    };
    guard.pid = None;
    let take = |c: Arc<Mutex<Capture>>| {
        let capture = std::mem::replace(
            &mut *c.lock().expect("capture lock"),
            Capture::new(limits, spill_dir, "unused"),
        );
        capture.finish()
    };
    Ok(ChildEnd {
        code: status.and_then(exit_code),
        stdout: take(out),
        stderr: take(err),
        deadline_hit,
    })
}

fn signal(pid: Option<i32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Runs the job supervisor with `/bin/sh` on this machine. Its environment is cleared except
/// `PATH` and `LANG`, then what the job forwards is added: the same explicit set as every
/// other backend.
pub(crate) struct HostTransport {
    pub kind: BackendKind,
}

impl Transport for HostTransport {
    fn call<'a>(
        &'a self,
        verb: &'a str,
        args: Vec<String>,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<CallOutput>> {
        Box::pin(async move {
            let argv = supervisor::sh_argv(verb, &args);
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]).env_clear();
            for keep in ["PATH", "LANG"] {
                if let Some(v) = std::env::var_os(keep) {
                    cmd.env(keep, v);
                }
            }
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
            cmd.stdin(Stdio::null());
            let out = cmd
                .output()
                .await
                .map_err(|e| ExecError::io(format!("{} backend: running /bin/sh", self.kind), e))?;
            Ok(CallOutput {
                stdout: out.stdout,
                stderr: out.stderr,
                code: exit_code(out.status),
            })
        })
    }
}
