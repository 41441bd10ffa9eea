//! Running one command in a Modal sandbox through its command router: start it, read standard
//! output and standard error as two separate streams, and wait for its exit status. A broken
//! output stream is resumed from the byte offset already received (the router keeps an
//! exec's output), so a dropped connection loses and repeats nothing.
//!
//! [`RouterTransport`] runs the job [supervisor](crate::supervisor) this way, which gives the
//! Modal backend background jobs, kills of the whole tree and timeouts enforced inside the
//! sandbox, exactly as for Docker and SSH.

use std::collections::HashMap;
use std::time::Duration;

use super::client::{Router, status_error};
use crate::backend::{BackendKind, BoxFuture};
use crate::error::{ExecError, Result};
use crate::job::{CallOutput, Transport, random_token};
use crate::output::Capture;
use crate::supervisor;

/// How many broken streams or waits in a row are retried before the connection counts as lost.
const RETRIES: u32 = 30;
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Where received bytes go.
pub(crate) trait Sink: Send {
    /// Bytes received so far (the offset to resume from).
    fn received(&self) -> u64;
    /// Takes the next bytes.
    fn take(&mut self, data: &[u8]) -> Result<()>;
}

impl Sink for Capture {
    fn received(&self) -> u64 {
        self.total()
    }
    fn take(&mut self, data: &[u8]) -> Result<()> {
        self.push(data)
    }
}

impl Sink for Vec<u8> {
    fn received(&self) -> u64 {
        self.len() as u64
    }
    fn take(&mut self, data: &[u8]) -> Result<()> {
        self.extend_from_slice(data);
        Ok(())
    }
}

fn transient(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Unknown
            | tonic::Code::Internal
    )
}

async fn pump(router: &Router, exec_id: &str, stderr: bool, sink: &mut dyn Sink) -> Result<()> {
    let mut failures = 0;
    loop {
        let last = match router.read(exec_id, stderr, sink.received()).await {
            Ok(mut stream) => loop {
                match stream.message().await {
                    Ok(Some(m)) => {
                        failures = 0;
                        sink.take(&m.data)?;
                    }
                    Ok(None) => return Ok(()),
                    Err(s) => break s,
                }
            },
            Err(s) => s,
        };
        failures += 1;
        if !transient(&last) || failures > RETRIES {
            return Err(status_error("read the command's output", last));
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

async fn wait(router: &Router, exec_id: &str) -> Result<Option<i32>> {
    let mut failures = 0;
    loop {
        match router.wait(exec_id).await {
            Ok(code) => return Ok(code),
            Err(s) if transient(&s) && failures < RETRIES => {
                failures += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(s) => return Err(status_error("wait for the command", s)),
        }
    }
}

/// Runs `argv` in the sandbox to its end; returns its exit code (128+N for signal N).
pub(crate) async fn run_exec(
    router: &Router,
    argv: Vec<String>,
    env: HashMap<String, String>,
    timeout_secs: Option<u32>,
    out: &mut dyn Sink,
    err: &mut dyn Sink,
) -> Result<Option<i32>> {
    let exec_id = format!("nestbox-{}", random_token(16));
    router.start(&exec_id, argv, env, timeout_secs).await?;
    let (o, e, code) = tokio::join!(
        pump(router, &exec_id, false, out),
        pump(router, &exec_id, true, err),
        wait(router, &exec_id)
    );
    o?;
    e?;
    code
}

/// The supervisor's verbs, run as execs in the sandbox.
pub(crate) struct RouterTransport<'r> {
    pub router: &'r Router,
}

impl Transport for RouterTransport<'_> {
    fn call<'a>(
        &'a self,
        verb: &'a str,
        args: Vec<String>,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<CallOutput>> {
        Box::pin(async move {
            let argv = supervisor::sh_argv(verb, &args);
            let env: HashMap<String, String> = env.iter().cloned().collect();
            let mut stdout = Vec::new();
            let mut stderr = Vec::new();
            let code = run_exec(self.router, argv, env, None, &mut stdout, &mut stderr).await?;
            if code.is_none() {
                return Err(ExecError::Protocol {
                    backend: BackendKind::Modal,
                    action: format!("run the job supervisor ({verb})"),
                    message: "the router reported no exit status".into(),
                });
            }
            Ok(CallOutput {
                stdout,
                stderr,
                code,
            })
        })
    }
}
