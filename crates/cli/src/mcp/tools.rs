//! The two MCP tools, `run` and `process`: their schemas, argument checks, and results. Every
//! call goes through the [`Session`], so through the guard, the hooks and approval.

use std::collections::BTreeMap;
use std::time::Duration;

use nestbox_exec::{
    CallError, CapturedOutput, Gated, JobId, ProcessOp, RunResult, Session, Step, Stream,
};
use serde_json::{Map, Value, json};

/// Foreground commands without a timeout of their own get this one (an MCP call that never
/// returns is worse than a command killed after ten minutes).
const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// `process wait` without a timeout waits this long at most.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// `process log` without a limit returns this many bytes at most.
const DEFAULT_LOG_LIMIT: usize = 64 * 1024;

/// What every command gets unless the call says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    /// Variables forwarded to every command (`--env`).
    pub env: BTreeMap<String, String>,
    /// The working directory (`--workdir`).
    pub workdir: Option<String>,
    /// The timeout (`--timeout`); foreground commands otherwise get ten minutes.
    pub timeout: Option<Duration>,
}

/// The tools, bound to one session.
pub struct Tools {
    session: Session,
    defaults: Defaults,
}

impl Tools {
    /// Tools that run everything through `session`.
    pub fn new(session: Session, defaults: Defaults) -> Self {
        Tools { session, defaults }
    }

    /// Releases the backend (jobs keep running).
    pub async fn close(self) -> Result<(), nestbox_exec::ExecError> {
        self.session.close().await
    }

    /// True for the tools this server has.
    pub fn exists(name: &str) -> bool {
        matches!(name, "run" | "process")
    }

    /// The `tools/list` entries.
    pub fn definitions() -> Value {
        json!([
            {
                "name": "run",
                "title": "Run a command in the sandbox",
                "description": "Run a shell command line (sh -c) on nestbox's backend: a caged step, a hardened container, an SSH host or an Apptainer container, as configured. Dangerous commands are refused or need approval: a refusal comes back as an error naming the rule (id, reason, matched text); do not retry it or reach the same effect another way. Foreground runs return exit code, stdout and stderr (bounded: head and tail, with the path of the full output when truncated). With background=true the command starts as a job and its id comes back at once: use the process tool to poll, read, wait for or kill it.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "Shell command line, run with sh -c inside the sandbox."},
                        "workdir": {"type": "string", "description": "Working directory inside the sandbox (default: the backend's)."},
                        "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds after which the command's whole process tree is killed (default: 600 for foreground runs; none for background jobs unless the server sets one)."},
                        "background": {"type": "boolean", "default": false, "description": "Start as a background job and return its job id at once."}
                    },
                    "required": ["command"],
                    "additionalProperties": false
                },
                "annotations": {"destructiveHint": true, "openWorldHint": true}
            },
            {
                "name": "process",
                "title": "Manage background jobs",
                "description": "Manage background jobs started by the run tool: list (this session's jobs and their status), poll (status now), log (output from a byte offset; continue from next_offset), wait (until the job ends or the timeout passes), kill (the job's whole process tree), forget (delete a finished job's files).",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "kill", "forget"]},
                        "job_id": {"type": "string", "description": "The job id returned by run (all actions but list)."},
                        "stream": {"type": "string", "enum": ["stdout", "stderr"], "default": "stdout", "description": "log: which stream."},
                        "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "log: the byte offset to read from."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 1048576, "default": 65536, "description": "log: most bytes to return."},
                        "timeout": {"type": "number", "minimum": 0, "maximum": 3600, "default": 60, "description": "wait: most seconds to wait; the job may still be running afterwards."}
                    },
                    "required": ["action"],
                    "additionalProperties": false
                },
                "annotations": {"destructiveHint": true, "openWorldHint": false}
            }
        ])
    }

    /// Performs one call and returns its `CallToolResult`. Bad arguments, refusals and
    /// backend failures are tool errors (`isError: true`) the model can read, not protocol
    /// errors.
    pub async fn call(&self, name: &str, args: Value) -> Value {
        let outcome = match name {
            "run" => self.run(args).await,
            _ => self.process(args).await,
        };
        match outcome {
            Ok(v) => tool_result(v, false),
            Err(Failure::Args(msg)) => {
                tool_result(json!({"error": "invalid_arguments", "message": msg}), true)
            }
            Err(Failure::Call(CallError::Denied(d))) => {
                eprintln!("nestbox mcp: step {} refused: {}", d.step_id, d.message);
                tool_result(
                    json!({"error": "refused", "refused": d, "message": d.message}),
                    true,
                )
            }
            Err(Failure::Call(CallError::Exec(e))) => {
                tool_result(json!({"error": "backend", "message": e.to_string()}), true)
            }
        }
    }

    async fn run(&self, args: Value) -> Result<Value, Failure> {
        let a = Args::new(args, &["command", "workdir", "timeout", "background"])?;
        let command = a
            .string("command")?
            .ok_or_else(|| arg_error("`command` is required"))?;
        let background = a.bool("background")?.unwrap_or(false);
        let mut step = Step::shell(&self.session.shell(), &command);
        step.spec.env = self.defaults.env.clone();
        step.spec.workdir = a
            .string("workdir")?
            .or_else(|| self.defaults.workdir.clone());
        step.spec.timeout = a
            .seconds("timeout")?
            .or(self.defaults.timeout)
            .or((!background).then_some(DEFAULT_RUN_TIMEOUT));
        if background {
            let Gated { value, clearance } = self.session.spawn("run", &step).await?;
            eprintln!(
                "nestbox mcp: step {} started job {value}",
                clearance.step_id
            );
            return Ok(json!({
                "job_id": value,
                "status": "running",
                "step_id": clearance.step_id,
                "approval": clearance.cleared_by,
                "findings": clearance.findings,
            }));
        }
        let Gated { value, clearance } = self.session.run("run", &step).await?;
        Ok(run_json(
            &value,
            json!({
                "step_id": clearance.step_id,
                "approval": clearance.cleared_by,
                "findings": clearance.findings,
            }),
        ))
    }

    async fn process(&self, args: Value) -> Result<Value, Failure> {
        let a = Args::new(
            args,
            &["action", "job_id", "stream", "offset", "limit", "timeout"],
        )?;
        let action = a
            .string("action")?
            .ok_or_else(|| arg_error("`action` is required"))?;
        let job = || -> Result<JobId, Failure> {
            let id = a
                .string("job_id")?
                .ok_or_else(|| arg_error(format!("`{action}` needs `job_id`")))?;
            JobId::parse(&id).map_err(|e| arg_error(e.to_string()))
        };
        let op = match action.as_str() {
            "list" => ProcessOp::List,
            "poll" => ProcessOp::Poll(job()?),
            "log" => ProcessOp::Log {
                job: job()?,
                stream: match a.string("stream")?.as_deref() {
                    None | Some("stdout") => Stream::Stdout,
                    Some("stderr") => Stream::Stderr,
                    Some(other) => {
                        return Err(arg_error(format!(
                            "`stream` is stdout or stderr, not `{other}`"
                        )));
                    }
                },
                offset: a.uint("offset")?.unwrap_or(0),
                limit: a
                    .uint("limit")?
                    .map(|l| l.clamp(1, 1 << 20) as usize)
                    .unwrap_or(DEFAULT_LOG_LIMIT),
            },
            "wait" => ProcessOp::Wait {
                job: job()?,
                timeout: Some(
                    a.seconds("timeout")?
                        .unwrap_or(DEFAULT_WAIT)
                        .min(Duration::from_secs(3600)),
                ),
            },
            "kill" => ProcessOp::Kill(job()?),
            "forget" => ProcessOp::Forget(job()?),
            other => {
                return Err(arg_error(format!(
                    "`action` is one of list, poll, log, wait, kill, forget; not `{other}`"
                )));
            }
        };
        let Gated { value, clearance } = self.session.process("process", op).await?;
        let mut out = serde_json::to_value(&value).expect("answers serialize");
        if let Some(obj) = out.as_object_mut() {
            obj.insert("step_id".into(), json!(clearance.step_id));
        }
        Ok(out)
    }
}

/// Why a call did not produce a result.
enum Failure {
    Args(String),
    Call(CallError),
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        Failure::Call(e)
    }
}

impl From<nestbox_exec::ExecError> for Failure {
    fn from(e: nestbox_exec::ExecError) -> Self {
        Failure::Call(CallError::Exec(e))
    }
}

fn arg_error(msg: impl Into<String>) -> Failure {
    Failure::Args(msg.into())
}

/// A `CallToolResult`: the structured value, and the same as JSON text for clients (and
/// models) that read only text.
fn tool_result(value: Value, is_error: bool) -> Value {
    json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "structuredContent": value,
        "isError": is_error,
    })
}

fn stream_json(c: &CapturedOutput) -> Value {
    json!({
        "text": c.text(),
        "truncated": c.truncated,
        "total_bytes": c.total_bytes,
        "full_output": c.full_output,
    })
}

fn run_json(r: &RunResult, gate: Value) -> Value {
    let mut v = json!({
        "exit_code": r.exit_code,
        "timed_out": r.timed_out,
        "duration_ms": r.duration.as_millis() as u64,
        "backend": r.backend,
        "stdout": stream_json(&r.stdout),
        "stderr": stream_json(&r.stderr),
    });
    if let (Some(v), Value::Object(g)) = (v.as_object_mut(), gate) {
        v.extend(g);
    }
    v
}

/// Checked access to a call's arguments: unknown names and wrong types are errors.
struct Args(Map<String, Value>);

impl Args {
    fn new(v: Value, known: &[&str]) -> Result<Args, Failure> {
        let map = match v {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => return Err(arg_error("arguments must be an object")),
        };
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(arg_error(format!(
                "unknown argument `{k}` (known: {})",
                known.join(", ")
            )));
        }
        Ok(Args(map))
    }

    fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }

    fn string(&self, k: &str) -> Result<Option<String>, Failure> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(arg_error(format!("`{k}` must be a string"))),
        }
    }

    fn bool(&self, k: &str) -> Result<Option<bool>, Failure> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(arg_error(format!("`{k}` must be true or false"))),
        }
    }

    fn uint(&self, k: &str) -> Result<Option<u64>, Failure> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| arg_error(format!("`{k}` must be a non-negative integer"))),
        }
    }

    fn seconds(&self, k: &str) -> Result<Option<Duration>, Failure> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(s) if (0.0..=1e7).contains(&s) => Ok(Some(Duration::from_secs_f64(s))),
                _ => Err(arg_error(format!("`{k}` must be a number of seconds"))),
            },
        }
    }
}
