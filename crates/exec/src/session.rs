//! A guarded session: one backend behind one [`Gate`]. Every run, spawn and job operation
//! goes through the gate first, so the MCP server, `nestbox exec` and library callers share
//! the same guard, hooks and approval, and none of them can reach the backend around it.
//!
//! ```no_run
//! use nestbox_exec::{ApprovalMode, BackendConfig, ExecConfig, Gate, LocalConfig, Session, Step};
//!
//! nestbox_exec::block_on(async {
//!     let backend = nestbox_exec::open(&ExecConfig::new(BackendConfig::Local(LocalConfig::default()))).await?;
//!     let gate = Gate::new(ApprovalMode::Deny, backend.descriptor());
//!     let session = Session::new(backend, gate);
//!     let step = Step::shell(&session.shell(), "git push --force origin main");
//!     let refused = session.run("run", &step).await.unwrap_err();
//!     println!("{refused}");
//!     Ok::<(), nestbox_exec::ExecError>(())
//! });
//! ```

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::backend::{
    Backend, CommandSpec, Descriptor, JobId, JobStatus, OutputChunk, RunResult, Stream,
};
use crate::error::ExecError;
use crate::gate::{Clearance, Denial, Gate, ToolCall};

/// A call refused by the gate, or one that failed on the backend.
#[derive(Debug)]
pub enum CallError {
    /// The gate refused it (guard, hook or approval); nothing ran.
    Denied(Box<Denial>),
    /// The backend failed to do it.
    Exec(ExecError),
}

impl CallError {
    /// The exit status `nestbox exec` reports: 125 for a refusal (nestbox refused), else the
    /// backend error's own.
    pub fn exit_code(&self) -> i32 {
        match self {
            CallError::Denied(_) => 125,
            CallError::Exec(e) => e.exit_code(),
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Denied(d) => f.write_str(&d.message),
            CallError::Exec(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CallError {}

impl From<ExecError> for CallError {
    fn from(e: ExecError) -> Self {
        CallError::Exec(e)
    }
}

impl From<Denial> for CallError {
    fn from(d: Denial) -> Self {
        CallError::Denied(Box::new(d))
    }
}

/// A result that got through the gate, with how it got through.
#[derive(Debug, Clone, Serialize)]
pub struct Gated<T> {
    /// What the backend returned.
    pub value: T,
    /// The gate's record of the call.
    pub clearance: Clearance,
}

/// A command to run: what the backend runs, and the shell text the guard and hooks judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What the backend runs.
    pub spec: CommandSpec,
    /// The command as shell text.
    pub text: String,
}

impl Step {
    /// Shell text run by `shell` (e.g. `["sh", "-c"]`): the guard judges the text itself.
    pub fn shell(shell: &[String], text: &str) -> Step {
        let mut argv = shell.to_vec();
        argv.push(text.to_owned());
        Step {
            spec: CommandSpec::new(argv),
            text: text.to_owned(),
        }
    }

    /// An argument vector: the guard judges it quoted as one shell command line, so
    /// `["sh", "-c", "rm -rf /"]` is judged like `sh -c 'rm -rf /'` (payload and all).
    pub fn argv(spec: CommandSpec) -> Step {
        let text = spec
            .argv
            .iter()
            .map(|w| quote_word(w))
            .collect::<Vec<_>>()
            .join(" ");
        Step { spec, text }
    }
}

/// Quotes a word for a shell command line (single quotes unless it is plainly safe).
pub fn quote_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A job operation (the `process` tool, `nestbox exec --poll` and friends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessOp {
    /// The jobs this session started, with their status.
    List,
    /// One job's status, without waiting.
    Poll(JobId),
    /// Part of a job's output.
    Log {
        /// The job.
        job: JobId,
        /// Which stream.
        stream: Stream,
        /// Where to start, in bytes.
        offset: u64,
        /// Most bytes to return.
        limit: usize,
    },
    /// Wait for a job to end, at most `timeout`.
    Wait {
        /// The job.
        job: JobId,
        /// How long at most; `None`: until it ends.
        timeout: Option<Duration>,
    },
    /// Kill a job's whole process tree.
    Kill(JobId),
    /// Delete a job's files (killing it first if it runs).
    Forget(JobId),
}

impl ProcessOp {
    /// The operation's name, as the `process` tool spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ProcessOp::List => "list",
            ProcessOp::Poll(_) => "poll",
            ProcessOp::Log { .. } => "log",
            ProcessOp::Wait { .. } => "wait",
            ProcessOp::Kill(_) => "kill",
            ProcessOp::Forget(_) => "forget",
        }
    }

    /// The job it is about, if any.
    pub fn job(&self) -> Option<&JobId> {
        match self {
            ProcessOp::List => None,
            ProcessOp::Poll(j) | ProcessOp::Kill(j) | ProcessOp::Forget(j) => Some(j),
            ProcessOp::Log { job, .. } | ProcessOp::Wait { job, .. } => Some(job),
        }
    }
}

/// What a job operation returned.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ProcessAnswer {
    /// `list`: this session's jobs.
    Jobs {
        /// One entry per job, oldest first.
        jobs: Vec<JobEntry>,
    },
    /// `poll`, `wait`, `kill`: the job's status.
    Status(JobStatus),
    /// `log`: a piece of output.
    Log(OutputChunk),
    /// `forget`: the job's files are gone.
    Forgotten {
        /// The job.
        forgotten: JobId,
    },
}

impl ProcessAnswer {
    /// The status, for `poll`, `wait` and `kill`.
    pub fn into_status(self) -> Option<JobStatus> {
        match self {
            ProcessAnswer::Status(s) => Some(s),
            _ => None,
        }
    }

    /// The output piece, for `log`.
    pub fn into_log(self) -> Option<OutputChunk> {
        match self {
            ProcessAnswer::Log(c) => Some(c),
            _ => None,
        }
    }
}

/// One job in a `list` answer.
#[derive(Debug, Clone, Serialize)]
pub struct JobEntry {
    /// The job.
    pub id: JobId,
    /// The command as the agent wrote it.
    pub command: String,
    /// The step that started it.
    pub step_id: String,
    /// When it was started, seconds since the Unix epoch (this machine's clock).
    pub started_at: u64,
    /// Its status now (absent when it could not be learned: see `error`).
    pub status: Option<JobStatus>,
    /// Why the status could not be learned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

struct JobRecord {
    id: JobId,
    command: String,
    step_id: String,
    started_at: u64,
}

/// One backend behind one gate (see the module documentation).
pub struct Session {
    backend: Box<dyn Backend>,
    gate: Gate,
    shell: Vec<String>,
    jobs: Mutex<Vec<JobRecord>>,
}

impl Session {
    /// Puts `backend` behind `gate`. Shell text runs with `sh -c` unless [`with_shell`]
    /// says otherwise.
    ///
    /// [`with_shell`]: Session::with_shell
    pub fn new(backend: Box<dyn Backend>, gate: Gate) -> Self {
        Session {
            backend,
            gate,
            shell: vec!["sh".into(), "-c".into()],
            jobs: Mutex::new(Vec::new()),
        }
    }

    /// Runs shell text with `shell` (e.g. `["bash", "-c"]`) instead of `sh -c`.
    pub fn with_shell(mut self, shell: Vec<String>) -> Self {
        self.shell = shell;
        self
    }

    /// The shell prefix for shell text.
    pub fn shell(&self) -> Vec<String> {
        self.shell.clone()
    }

    /// The gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The backend's descriptor.
    pub fn descriptor(&self) -> &Descriptor {
        self.backend.descriptor()
    }

    fn command_call(tool: &str, step: &Step, background: bool) -> ToolCall {
        ToolCall {
            tool: tool.to_owned(),
            command: Some(step.text.clone()),
            argv: Some(step.spec.argv.clone()),
            workdir: step.spec.workdir.clone(),
            timeout_ms: step.spec.timeout.map(|t| t.as_millis() as u64),
            background,
            action: None,
            job: None,
        }
    }

    /// Runs `step` in the foreground, if the gate lets it.
    pub async fn run(&self, tool: &str, step: &Step) -> Result<Gated<RunResult>, CallError> {
        step.spec.validate()?;
        let clearance = self
            .gate
            .check(&Self::command_call(tool, step, false))
            .await?;
        let value = self.backend.run(&step.spec).await?;
        Ok(Gated { value, clearance })
    }

    /// Starts `step` as a background job, if the gate lets it.
    pub async fn spawn(&self, tool: &str, step: &Step) -> Result<Gated<JobId>, CallError> {
        step.spec.validate()?;
        let clearance = self
            .gate
            .check(&Self::command_call(tool, step, true))
            .await?;
        let id = self.backend.spawn(&step.spec).await?;
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.jobs.lock().expect("jobs").push(JobRecord {
            id: id.clone(),
            command: step.text.clone(),
            step_id: clearance.step_id.clone(),
            started_at,
        });
        Ok(Gated {
            value: id,
            clearance,
        })
    }

    /// Performs a job operation, if the gate (its hooks) lets it.
    pub async fn process(
        &self,
        tool: &str,
        op: ProcessOp,
    ) -> Result<Gated<ProcessAnswer>, CallError> {
        let call = ToolCall {
            tool: tool.to_owned(),
            action: Some(op.name().to_owned()),
            job: op.job().map(|j| j.as_str().to_owned()),
            ..ToolCall::default()
        };
        let clearance = self.gate.check(&call).await?;
        let b = &self.backend;
        let value = match op {
            ProcessOp::List => ProcessAnswer::Jobs {
                jobs: self.list().await,
            },
            ProcessOp::Poll(j) => ProcessAnswer::Status(b.poll(&j).await?),
            ProcessOp::Log {
                job,
                stream,
                offset,
                limit,
            } => ProcessAnswer::Log(b.read(&job, stream, offset, limit).await?),
            ProcessOp::Wait { job, timeout } => ProcessAnswer::Status(b.wait(&job, timeout).await?),
            ProcessOp::Kill(j) => ProcessAnswer::Status(b.kill(&j).await?),
            ProcessOp::Forget(j) => {
                b.forget(&j).await?;
                self.jobs.lock().expect("jobs").retain(|r| r.id != j);
                ProcessAnswer::Forgotten { forgotten: j }
            }
        };
        Ok(Gated { value, clearance })
    }

    async fn list(&self) -> Vec<JobEntry> {
        let records: Vec<(JobId, String, String, u64)> = self
            .jobs
            .lock()
            .expect("jobs")
            .iter()
            .map(|r| {
                (
                    r.id.clone(),
                    r.command.clone(),
                    r.step_id.clone(),
                    r.started_at,
                )
            })
            .collect();
        let mut out = Vec::with_capacity(records.len());
        for (id, command, step_id, started_at) in records {
            let (status, error) = match self.backend.poll(&id).await {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e.to_string())),
            };
            out.push(JobEntry {
                id,
                command,
                step_id,
                started_at,
                status,
                error,
            });
        }
        out
    }

    /// Releases the backend (jobs keep running).
    pub async fn close(mut self) -> Result<(), ExecError> {
        self.backend.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_argument_vector_is_judged_as_its_quoted_command_line() {
        let step = Step::argv(CommandSpec::new(["sh", "-c", "rm -rf /"]));
        assert_eq!(step.text, "sh -c 'rm -rf /'");
        assert!(crate::guard::classify(&step.text).is_hardline());
        let step = Step::argv(CommandSpec::new(["echo", "it's"]));
        assert_eq!(step.text, r"echo 'it'\''s'");
    }

    #[test]
    fn shell_text_runs_with_the_shell_and_is_judged_as_written() {
        let step = Step::shell(&["sh".into(), "-c".into()], "ls -la | wc -l");
        assert_eq!(step.spec.argv, ["sh", "-c", "ls -la | wc -l"]);
        assert_eq!(step.text, "ls -la | wc -l");
    }
}
