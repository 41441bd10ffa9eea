//! How commands run on the remote host: always under the [supervisor](crate::supervisor),
//! which `ssh` feeds to `sh -s` on the remote side (the remote command line is the constant
//! `sh -s`; the script, the command and the environment's values travel on standard input).
//!
//! - **Foreground** (`run-files`): the supervisor starts the command under `setsid` with its
//!   output going to files in the job directory, enforces the timeout remotely, and a pump
//!   copies what the files gain to the session's standard output and error as it comes. This
//!   side counts the bytes it received. If the connection drops (ssh exits 255, or the master
//!   is killed) or the pump fails (the supervisor then exits 255 too), the job keeps running; this side re-connects and *re-attaches* (`attach`
//!   from the byte offsets it already has), so nothing is lost and nothing is repeated.
//! - **Background** (`spawn`): the same supervisor, detached; poll, read, wait and kill are
//!   short sessions.
//! - **Kill and timeout** are carried out by the supervisor on the remote host, on the
//!   command's process group and every process carrying the job's marker. Killing the local
//!   `ssh` client never stops a remote command, and is never how one is stopped.
//!
//! An exit status of 255 is ambiguous (ssh's own failure, or the command's code); the job's
//! recorded status settles it.

use std::path::PathBuf;
use std::time::Duration;

use crate::backend::{BackendKind, BoxFuture, CommandSpec, JobId, JobState};
use crate::error::{ExecError, Result};
use crate::job::{CallOutput, Transport, parse_status};
use crate::output::Capture;
use crate::supervisor;

use super::connection::Connection;

/// Supervisor verbs over `ssh ... sh -s`.
pub(crate) struct SshTransport<'c> {
    pub conn: &'c Connection,
    pub spill_dir: PathBuf,
}

impl SshTransport<'_> {
    fn connection_lost(&self, action: &str) -> ExecError {
        ExecError::Connection {
            backend: BackendKind::Ssh,
            action: action.to_string(),
            message: self.conn.last_error(),
        }
    }
}

impl Transport for SshTransport<'_> {
    fn call<'a>(
        &'a self,
        verb: &'a str,
        args: Vec<String>,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<CallOutput>> {
        Box::pin(async move {
            let program = supervisor::stdin_program(verb, &args, env);
            // Job verbs other than spawn are idempotent: one retry over a fresh master.
            let attempts = if verb == "spawn" { 1 } else { 2 };
            for attempt in 0..attempts {
                if attempt > 0 {
                    self.conn.ensure_master().await?;
                }
                let (code, stdout, stderr) = self.conn.collect(&program, &self.spill_dir).await?;
                if code != Some(255) {
                    return Ok(CallOutput {
                        stdout,
                        stderr,
                        code,
                    });
                }
            }
            Err(self.connection_lost(&format!("run the job supervisor ({verb})")))
        })
    }
}

/// The outcome of a foreground run over SSH.
pub(crate) struct Foreground {
    pub code: Option<i32>,
    /// The job's timeout ended it (from the job's record when a re-attach was needed).
    pub timed_out: Option<bool>,
    /// The local deadline passed and the remote tree was killed from a fresh session.
    pub deadline_hit: bool,
}

/// Runs `cmd` in the foreground in job directory `dir`, re-attaching after connection drops
/// for up to `reattach_for`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_foreground(
    conn: &Connection,
    transport: &SshTransport<'_>,
    dir: &str,
    cmd: &CommandSpec,
    workdir: Option<&str>,
    grace_secs: u64,
    reattach_for: Duration,
    out: &mut Capture,
    err: &mut Capture,
) -> Result<Foreground> {
    let env: Vec<(String, String)> = cmd.env.clone().into_iter().collect();
    let args = supervisor::start_args(
        dir,
        workdir,
        supervisor::timeout_secs(cmd.timeout),
        grace_secs,
        &cmd.argv,
    );
    let program = supervisor::stdin_program("run-files", &args, &env);
    // The remote watchdog fires at the timeout; this local one only covers a session that
    // hangs (a frozen link that keep-alives have not noticed yet).
    let local_deadline = cmd
        .timeout
        .map(|t| t + Duration::from_secs(grace_secs + 10));
    let started = tokio::time::Instant::now();
    let log_mark = conn.log_len();
    let mut end = conn.session(&program, out, err, local_deadline).await?;
    let mut deadline_hit = false;
    let mut reattached = false;
    let give_up_at = tokio::time::Instant::now() + reattach_for;
    let job = JobId::parse("foreground")?;
    let lost = |action: &str| ExecError::Connection {
        backend: BackendKind::Ssh,
        action: action.to_string(),
        message: conn.last_error(),
    };
    let result = loop {
        match end.code {
            Some(code) if code != 255 => {
                break Foreground {
                    code: Some(code),
                    timed_out: None,
                    deadline_hit,
                };
            }
            Some(_) => {}
            None => {
                // Our deadline: make sure the remote tree is gone, then collect the rest.
                deadline_hit = true;
                let _ = transport
                    .call("kill", vec![dir.into(), grace_secs.to_string()], &[])
                    .await;
            }
        }
        // 255 (ssh failed, or the command's own code) or our deadline: the job's record
        // says which, and how much output we are missing.
        if tokio::time::Instant::now() > give_up_at {
            return Err(lost(&format!(
                "re-attach to the command (job directory {dir} on the remote host; it may still be running)"
            )));
        }
        if conn.ensure_master().await.is_err() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let status = match transport.call("poll", vec![dir.into()], &[]).await {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let line = status.lines().next().unwrap_or_default();
        match parse_status(BackendKind::Ssh, &job, line)? {
            None if conn.log_len() == log_mark && !reattached => {
                // Delivered whole and cleaned up: the 255 was the command's.
                break Foreground {
                    code: end.code,
                    timed_out: None,
                    deadline_hit,
                };
            }
            None => {
                return Err(lost(
                    "finish the command: the connection dropped and its job directory is gone, so it either never started or ended while the link was down (its last output may be missing)",
                ));
            }
            Some(s) => {
                if let JobState::Finished {
                    exit_code,
                    timed_out,
                    ..
                } = s.state
                    && out.total() >= s.stdout_bytes
                    && err.total() >= s.stderr_bytes
                {
                    reattached = true;
                    break Foreground {
                        code: Some(if timed_out { 124 } else { exit_code }),
                        timed_out: Some(timed_out),
                        deadline_hit,
                    };
                }
            }
        }
        reattached = true;
        let attach = supervisor::stdin_program(
            "attach",
            &[dir.into(), out.total().to_string(), err.total().to_string()],
            &[],
        );
        let remaining = local_deadline.map(|d| {
            d.saturating_sub(started.elapsed())
                .max(Duration::from_secs(5))
        });
        end = conn.session(&attach, out, err, remaining).await?;
        if end.code.is_some_and(|c| c != 255) {
            // attach ends with the job's own code once it has delivered everything.
            end.code = Some(255);
        }
    };
    if reattached {
        let _ = transport
            .call("forget", vec![dir.into(), grace_secs.to_string()], &[])
            .await;
    }
    Ok(result)
}
