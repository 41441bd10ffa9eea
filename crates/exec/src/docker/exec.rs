//! Execs in the container: create, start attached, demultiplex standard output and standard
//! error from the raw stream, then inspect for the exit code. Environment values travel in the
//! exec's `Env` field (the request body), never in its command.
//!
//! Every exec runs the [supervisor](crate::supervisor) (`/bin/sh -c SCRIPT nestbox VERB ...`),
//! never the command directly: the supervisor puts the command in its own process group, marks
//! its environment, enforces the timeout next to it, and lets a *second* exec kill the whole
//! tree. Killing an exec's stream (the client) is never how a command is stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;

use crate::backend::{BackendKind, BoxFuture};
use crate::error::{ExecError, Result};
use crate::job::{CallOutput, Transport};
use crate::output::Capture;
use crate::supervisor;

/// Maps an engine error to ours, with what we were doing.
pub(crate) fn engine_error(action: &str, e: bollard::errors::Error) -> ExecError {
    ExecError::Engine {
        backend: BackendKind::Docker,
        action: action.to_string(),
        message: e.to_string(),
    }
}

/// One exec's identity: which container, as which user.
#[derive(Clone)]
pub(crate) struct ExecTarget {
    pub docker: Docker,
    pub container: String,
    pub user: String,
}

impl ExecTarget {
    /// Creates and starts an attached exec of `argv` with `env`; returns its id and stream.
    async fn start(
        &self,
        argv: Vec<String>,
        env: &BTreeMap<String, String>,
    ) -> Result<(String, ExecStream)> {
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let created = self
            .docker
            .create_exec(
                &self.container,
                CreateExecOptions {
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    attach_stdin: Some(false),
                    tty: Some(false),
                    env: Some(env),
                    cmd: Some(argv),
                    user: Some(self.user.clone()),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| engine_error("create an exec", e))?;
        let started = self
            .docker
            .start_exec(
                &created.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| engine_error("start an exec", e))?;
        match started {
            StartExecResults::Attached { output, .. } => Ok((created.id, output)),
            StartExecResults::Detached => Err(ExecError::Protocol {
                backend: BackendKind::Docker,
                action: "start an exec".into(),
                message: "the engine detached an exec that asked to be attached".into(),
            }),
        }
    }

    /// The exec's exit code, once the engine has recorded it. The stream can end a moment
    /// before the engine marks the exec finished, so this retries briefly.
    async fn exit_code(&self, exec_id: &str) -> Result<Option<i32>> {
        for _ in 0..100 {
            let info = self
                .docker
                .inspect_exec(exec_id)
                .await
                .map_err(|e| engine_error("inspect an exec", e))?;
            if info.running != Some(true) {
                return Ok(info.exit_code.map(|c| c as i32));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(None)
    }

    /// Runs the supervisor verb and collects everything it prints.
    pub async fn call_collect(
        &self,
        verb: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
    ) -> Result<CallOutput> {
        let (id, mut stream) = self.start(supervisor::sh_argv(verb, args), env).await?;
        let mut out = CallOutput::default();
        while let Some(item) = stream.next().await {
            match item.map_err(|e| engine_error("read an exec's output", e))? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    out.stdout.extend_from_slice(&message)
                }
                LogOutput::StdErr { message } => out.stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
        out.code = self.exit_code(&id).await?;
        Ok(out)
    }

    /// Runs the supervisor's foreground `run` verb, streaming into the captures. Returns the
    /// exit code and whether `deadline` passed before the stream ended (then `on_deadline` ran,
    /// which kills the tree through another exec, and the stream was drained a little longer).
    pub async fn call_streaming<F>(
        &self,
        args: &[String],
        env: &BTreeMap<String, String>,
        out: &mut Capture,
        err: &mut Capture,
        deadline: Option<Duration>,
        on_deadline: F,
    ) -> Result<(Option<i32>, bool)>
    where
        F: std::future::Future<Output = ()>,
    {
        let (id, mut stream) = self.start(supervisor::sh_argv("run", args), env).await?;
        let mut deadline_hit = false;
        match deadline {
            None => pump(&mut stream, out, err).await?,
            Some(d) => {
                if tokio::time::timeout(d, pump(&mut stream, out, err))
                    .await
                    .is_err()
                {
                    deadline_hit = true;
                    on_deadline.await;
                    // The supervisor has been told to kill the tree; whatever is still in
                    // flight arrives within moments, or never (then give up on the stream).
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), pump(&mut stream, out, err))
                            .await;
                }
            }
        }
        let code = self.exit_code(&id).await?;
        Ok((code, deadline_hit))
    }
}

type ExecStream = std::pin::Pin<
    Box<
        dyn futures_util::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>>
            + Send,
    >,
>;

async fn pump(stream: &mut ExecStream, out: &mut Capture, err: &mut Capture) -> Result<()> {
    while let Some(item) = stream.next().await {
        match item.map_err(|e| engine_error("read an exec's output", e))? {
            LogOutput::StdOut { message } | LogOutput::Console { message } => out.push(&message)?,
            LogOutput::StdErr { message } => err.push(&message)?,
            LogOutput::StdIn { .. } => {}
        }
    }
    Ok(())
}

/// The [`Transport`] of one container: supervisor verbs as execs.
pub(crate) struct DockerTransport {
    pub target: ExecTarget,
}

impl Transport for DockerTransport {
    fn call<'a>(
        &'a self,
        verb: &'a str,
        args: Vec<String>,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<CallOutput>> {
        Box::pin(async move {
            let env: BTreeMap<String, String> = env.iter().cloned().collect();
            self.target.call_collect(verb, &args, &env).await
        })
    }
}
