//! Background jobs, the same way for every backend: a job is a directory inside the sandbox
//! that the [supervisor](crate::supervisor) keeps, and every operation on it (poll, read from
//! an offset, wait, kill, forget) is one supervisor call through the backend's
//! [`Transport`]: a container exec, an `ssh` session, or `sh` on this machine.
//!
//! Nothing about a job lives only in this process, so a job spawned by one `nestbox exec` can
//! be polled, tailed and killed by the next, and an SSH job survives a dropped connection.

use std::io::Read;
use std::time::Duration;

use crate::backend::{
    BackendKind, BoxFuture, CommandSpec, JobId, JobState, JobStatus, OutputChunk, Stream,
};
use crate::error::{ExecError, Result};
use crate::output::CapturedOutput;
use crate::supervisor;

/// The most bytes one [`read`](crate::Backend::read) returns; read again from `next_offset`.
pub const MAX_READ: usize = 8 << 20;

/// What one supervisor call returned.
#[derive(Debug, Default)]
pub(crate) struct CallOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// `None` when the transport could not learn it.
    pub code: Option<i32>,
}

impl CallOutput {
    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_string()
    }
}

/// How a backend runs the supervisor inside its sandbox.
pub(crate) trait Transport: Send + Sync {
    /// Runs `nb_main VERB ARGS...` with `env` added to the supervisor's environment (only the
    /// start verbs pass any) and collects what it printed.
    fn call<'a>(
        &'a self,
        verb: &'a str,
        args: Vec<String>,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<CallOutput>>;
}

/// A random lowercase hex token of `bytes` bytes from the kernel's generator.
pub fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !filled {
        // getrandom(2) never fails on a kernel that has Landlock; keep going regardless.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ u128::from(std::process::id());
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (seed >> ((i % 16) * 8)) as u8;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses the supervisor's status line (`nestbox-job STATE CODE OUT ERR STARTED FINISHED
/// FLAGS...`). `Ok(None)` means the job directory does not exist.
pub(crate) fn parse_status(kind: BackendKind, id: &JobId, line: &str) -> Result<Option<JobStatus>> {
    let bad = || ExecError::Protocol {
        backend: kind,
        action: format!("read the status of job {id}"),
        message: format!("`{}`", line.trim()),
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["nestbox-job", "missing"] => Ok(None),
        [
            "nestbox-job",
            state,
            code,
            out,
            err,
            started,
            finished,
            flags @ ..,
        ] => {
            let number = |w: &str| w.parse::<u64>().ok();
            let flag = |f: &str| flags.contains(&f);
            let state = match *state {
                "running" => JobState::Running,
                "lost" => JobState::Lost,
                "finished" => JobState::Finished {
                    exit_code: code.parse().map_err(|_| bad())?,
                    timed_out: flag("timedout"),
                    killed: flag("killed"),
                },
                _ => return Err(bad()),
            };
            Ok(Some(JobStatus {
                id: id.clone(),
                state,
                stdout_bytes: number(out).ok_or_else(bad)?,
                stderr_bytes: number(err).ok_or_else(bad)?,
                started_at: number(started),
                finished_at: number(finished),
            }))
        }
        _ => Err(bad()),
    }
}

/// Job operations over one transport, for jobs in directories the backend names.
pub(crate) struct Jobs<'t> {
    pub transport: &'t dyn Transport,
    pub kind: BackendKind,
    /// Seconds between SIGTERM and SIGKILL when the supervisor kills a tree.
    pub grace_secs: u64,
}

impl Jobs<'_> {
    fn no_such_job(&self, id: &JobId, dir: &str) -> ExecError {
        ExecError::NoSuchJob {
            backend: self.kind,
            id: id.to_string(),
            detail: Some(format!("no job directory {dir}")),
        }
    }

    fn status_or_missing(&self, id: &JobId, dir: &str, out: &CallOutput) -> Result<JobStatus> {
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next().unwrap_or_default();
        if line.is_empty() {
            return Err(ExecError::Protocol {
                backend: self.kind,
                action: format!("read the status of job {id}"),
                message: format!("no status line (stderr: {})", out.stderr_text()),
            });
        }
        parse_status(self.kind, id, line)?.ok_or_else(|| self.no_such_job(id, dir))
    }

    /// Starts `cmd` in the background in job directory `dir` (absolute, or a bare name in the
    /// sandbox's default jobs directory). `argv` is what the supervisor runs (the command, or a
    /// launcher around it).
    pub async fn spawn(&self, dir: &str, cmd: &CommandSpec, argv: &[String]) -> Result<()> {
        let env: Vec<(String, String)> = cmd.env.clone().into_iter().collect();
        let args = supervisor::start_args(
            dir,
            cmd.workdir.as_deref(),
            supervisor::timeout_secs(cmd.timeout),
            self.grace_secs,
            argv,
        );
        let out = self.transport.call("spawn", args, &env).await?;
        self.check_started(cmd, &out)
    }

    /// Turns a start verb's failure into the right error: command not found (127 with the
    /// supervisor's notice), refused (125 with `nestbox:`), or anything else unexpected.
    pub fn check_started(&self, cmd: &CommandSpec, out: &CallOutput) -> Result<()> {
        match out.code {
            Some(0) => Ok(()),
            code => Err(
                start_failure(self.kind, cmd, code, &out.stderr).unwrap_or_else(|| {
                    ExecError::Protocol {
                        backend: self.kind,
                        action: "start a job".into(),
                        message: format!("supervisor exited {code:?}: {}", out.stderr_text()),
                    }
                }),
            ),
        }
    }

    /// Where the job stands.
    pub async fn poll(&self, id: &JobId, dir: &str) -> Result<JobStatus> {
        let out = self.transport.call("poll", vec![dir.into()], &[]).await?;
        self.status_or_missing(id, dir, &out)
    }

    /// Up to `max` bytes (at most [`MAX_READ`]) of `stream` from `offset`.
    pub async fn read(
        &self,
        id: &JobId,
        dir: &str,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        let args = vec![
            dir.into(),
            stream.file_name().into(),
            offset.to_string(),
            max.min(MAX_READ).to_string(),
        ];
        let out = self.transport.call("read", args, &[]).await?;
        let split = out
            .stdout
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(out.stdout.len());
        let line = String::from_utf8_lossy(&out.stdout[..split]).into_owned();
        let status =
            parse_status(self.kind, id, &line)?.ok_or_else(|| self.no_such_job(id, dir))?;
        let data = out.stdout.get(split + 1..).unwrap_or_default().to_vec();
        Ok(OutputChunk::read_at(&status, stream, offset, data))
    }

    /// Waits until the job is done or `timeout` passes, in long polls the supervisor answers
    /// inside the sandbox (so waiting costs one round trip per 30 s, not one per poll).
    pub async fn wait(
        &self,
        id: &JobId,
        dir: &str,
        timeout: Option<Duration>,
    ) -> Result<JobStatus> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            let slice = match deadline {
                Some(d) => d
                    .saturating_duration_since(tokio::time::Instant::now())
                    .min(Duration::from_secs(30)),
                None => Duration::from_secs(30),
            };
            let secs = slice.as_secs().max(u64::from(!slice.is_zero()));
            let out = self
                .transport
                .call("wait", vec![dir.into(), secs.to_string()], &[])
                .await?;
            let status = self.status_or_missing(id, dir, &out)?;
            let expired = deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
            if status.is_done() || expired {
                return Ok(status);
            }
        }
    }

    /// Kills the job's tree (SIGTERM, grace, SIGKILL) and returns the final status.
    pub async fn kill(&self, id: &JobId, dir: &str) -> Result<JobStatus> {
        let out = self
            .transport
            .call("kill", vec![dir.into(), self.grace_secs.to_string()], &[])
            .await?;
        self.status_or_missing(id, dir, &out)
    }

    /// Removes the job's directory, killing it first if it still runs.
    pub async fn forget(&self, id: &JobId, dir: &str) -> Result<()> {
        self.poll(id, dir).await?;
        self.transport
            .call("forget", vec![dir.into(), self.grace_secs.to_string()], &[])
            .await?;
        Ok(())
    }
}

/// The error a failed start means, when it means one: the supervisor's "command not found"
/// (127 and its notice) or a refusal (125 and a `nestbox:` line).
fn start_failure(
    kind: BackendKind,
    cmd: &CommandSpec,
    code: Option<i32>,
    stderr: &[u8],
) -> Option<ExecError> {
    let text = String::from_utf8_lossy(stderr);
    let last = text.trim_end().lines().last().unwrap_or_default();
    let program = cmd.argv.first().cloned().unwrap_or_default();
    match code {
        Some(127) if last == format!("nestbox: command not found: {program}") => {
            Some(ExecError::CommandNotFound {
                backend: kind,
                program,
                detail: None,
            })
        }
        Some(125) if last.starts_with("nestbox: ") => Some(ExecError::Refused {
            backend: kind,
            message: last.trim_start_matches("nestbox: ").to_string(),
        }),
        _ => None,
    }
}

/// Reads how a foreground run under the supervisor ended: a failed start becomes its error,
/// else the answer is whether the run timed out. `known_timeout` is what the backend learned
/// itself (its own deadline passed, a reattached status said so); without it, the supervisor's
/// notice at the end of standard error decides.
pub(crate) fn supervised_end(
    kind: BackendKind,
    cmd: &CommandSpec,
    code: Option<i32>,
    stderr: &CapturedOutput,
    known_timeout: Option<bool>,
) -> Result<bool> {
    let last = stderr.last_bytes();
    match start_failure(kind, cmd, code, last) {
        Some(e) => Err(e),
        None => Ok(known_timeout.unwrap_or_else(|| ended_by_timeout(code, last))),
    }
}

/// True when a foreground run's end is the supervisor's timeout: exit 124 and its notice as the
/// last line of standard error.
fn ended_by_timeout(code: Option<i32>, stderr_tail: &[u8]) -> bool {
    code == Some(124) && stderr_tail.ends_with(supervisor::TIMEOUT_NOTICE.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> JobId {
        JobId::parse("j1").unwrap()
    }

    #[test]
    fn status_lines_parse_into_states() {
        let s = parse_status(
            BackendKind::Ssh,
            &id(),
            "nestbox-job finished 143 10 2 100 105 timedout killed",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            s.state,
            JobState::Finished {
                exit_code: 143,
                timed_out: true,
                killed: true
            }
        );
        assert_eq!((s.stdout_bytes, s.stderr_bytes), (10, 2));
        assert_eq!((s.started_at, s.finished_at), (Some(100), Some(105)));
        let r = parse_status(BackendKind::Ssh, &id(), "nestbox-job running - 0 0 100 -")
            .unwrap()
            .unwrap();
        assert_eq!(r.state, JobState::Running);
        assert_eq!(r.finished_at, None);
        assert!(
            parse_status(BackendKind::Ssh, &id(), "nestbox-job missing")
                .unwrap()
                .is_none()
        );
        assert!(parse_status(BackendKind::Ssh, &id(), "garbage").is_err());
    }

    #[test]
    fn start_failures_are_told_apart_from_commands_that_exit_127() {
        let cmd = CommandSpec::new(["nope"]);
        let nf = start_failure(
            BackendKind::Docker,
            &cmd,
            Some(127),
            b"nestbox: command not found: nope\n",
        );
        assert!(matches!(nf, Some(ExecError::CommandNotFound { .. })));
        let own = start_failure(BackendKind::Docker, &cmd, Some(127), b"make: nope\n");
        assert!(own.is_none());
    }

    #[test]
    fn tokens_are_hex_of_the_asked_length() {
        let t = random_token(6);
        assert_eq!(t.len(), 12);
        assert!(t.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(t, random_token(6));
    }
}
