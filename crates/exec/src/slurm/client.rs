//! The cluster's own client tools, run as child processes: `sbatch` and `srun` to submit,
//! `scontrol` (then `sacct`) to learn a job's state and exit code, `scancel` to end it,
//! `scontrol ping` to check the controller answers. Parsing their answers lives here too.
//!
//! Never `sbatch --wait` for a result: it polls at 2 s, then 8 s later, and it exits 0 for a
//! job that was cancelled. The state and `ExitCode=<code>:<signal>` come from `scontrol show
//! job` while the controller remembers the job (MinJobAge), then from `sacct` (with `-c`, the
//! job completion log, when accounting storage is disabled).

use std::path::PathBuf;
use std::process::Stdio;

use crate::backend::BackendKind;
use crate::error::{ExecError, Result};

const HINT: &str = "install the cluster's client tools (Debian: slurm-client) or set bin_dir; set slurm_conf (or SLURM_CONF) when the cluster's slurm.conf is not in /etc/slurm";

/// A job as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SchedulerJob {
    /// `PENDING`, `RUNNING`, `COMPLETED`, `CANCELLED`, `TIMEOUT`, ...
    pub state: String,
    /// `ExitCode=<code>:<signal>`.
    pub exit: (i32, i32),
}

impl SchedulerJob {
    /// True when the scheduler is done with the job.
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "RESV_DEL_HOLD"
        )
    }

    /// The exit code in the shell's convention (128+N for signal N).
    pub fn exit_code(&self) -> i32 {
        match self.exit {
            (_, sig) if sig > 0 => 128 + sig,
            (code, _) => code,
        }
    }
}

/// Parses `ExitCode=3:0` or a bare `3:0`.
pub(crate) fn parse_exit(text: &str) -> Option<(i32, i32)> {
    let (code, sig) = text.trim().split_once(':')?;
    Some((code.parse().ok()?, sig.parse().ok()?))
}

/// Parses one line of `scontrol show job -o ID`.
pub(crate) fn parse_scontrol(line: &str) -> Option<SchedulerJob> {
    let mut state = None;
    let mut exit = None;
    for word in line.split_whitespace() {
        if let Some(s) = word.strip_prefix("JobState=") {
            state = Some(s.to_string());
        } else if let Some(e) = word.strip_prefix("ExitCode=") {
            exit = parse_exit(e);
        }
    }
    Some(SchedulerJob {
        state: state?,
        exit: exit?,
    })
}

/// Parses `sacct -n -P -X -o State,ExitCode` (`CANCELLED by 0|0:15`).
pub(crate) fn parse_sacct(text: &str) -> Option<SchedulerJob> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let (state, exit) = line.split_once('|')?;
    Some(SchedulerJob {
        state: state.split_whitespace().next()?.to_string(),
        exit: parse_exit(exit)?,
    })
}

/// Parses `sbatch --parsable`: `<id>` or `<id>;<cluster>`.
pub(crate) fn parse_job_id(text: &str) -> Option<String> {
    let id = text.trim().split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| id.to_string())
}

/// The client tools of one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub bin_dir: Option<PathBuf>,
    pub slurm_conf: Option<PathBuf>,
}

/// What a tool printed and how it exited.
pub(crate) struct ToolOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Tools {
    /// A command for `tool`, with `SLURM_CONF` set when configured.
    pub fn command(&self, tool: &str) -> tokio::process::Command {
        let program = match &self.bin_dir {
            Some(d) => d.join(tool),
            None => PathBuf::from(tool),
        };
        let mut cmd = tokio::process::Command::new(program);
        if let Some(conf) = &self.slurm_conf {
            cmd.env("SLURM_CONF", conf);
        }
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// The error for a tool that could not be started.
    pub fn missing(&self, tool: &str, e: std::io::Error) -> ExecError {
        ExecError::Unavailable {
            backend: BackendKind::Slurm,
            reason: format!("cannot run `{tool}`: {e}"),
            hint: Some(HINT.into()),
        }
    }

    /// Runs `tool ARGS` with `input` on its standard input and collects what it printed.
    pub async fn run(
        &self,
        tool: &str,
        args: &[String],
        input: Option<&str>,
    ) -> Result<ToolOutput> {
        let mut cmd = self.command(tool);
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| self.missing(tool, e))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            stdin
                .write_all(text.as_bytes())
                .await
                .map_err(|e| ExecError::io(format!("writing to {tool}"), e))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| ExecError::io(format!("waiting for {tool}"), e))?;
        Ok(ToolOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// Checks that the controller answers.
    pub async fn ping(&self) -> Result<()> {
        let out = self.run("scontrol", &["ping".into()], None).await?;
        if out.code == Some(0) && out.stdout.contains("is UP") {
            return Ok(());
        }
        Err(ExecError::Unavailable {
            backend: BackendKind::Slurm,
            reason: format!(
                "the Slurm controller does not answer: {}",
                first_nonempty(&[&out.stdout, &out.stderr])
            ),
            hint: Some(HINT.into()),
        })
    }

    /// Submits a batch script; returns the Slurm job id.
    pub async fn sbatch(&self, args: &[String], script: &str) -> Result<String> {
        let out = self.run("sbatch", args, Some(script)).await?;
        match (out.code, parse_job_id(&out.stdout)) {
            (Some(0), Some(id)) => Ok(id),
            _ => Err(refused_or_engine("submit the job (sbatch)", &out)),
        }
    }

    /// The job's state: `scontrol` while the controller remembers it, else `sacct`. `None`
    /// when neither knows the job.
    pub async fn state(&self, id: &str) -> Result<Option<SchedulerJob>> {
        let out = self
            .run(
                "scontrol",
                &["show".into(), "job".into(), "-o".into(), id.into()],
                None,
            )
            .await?;
        if out.code == Some(0)
            && let Some(job) = out.stdout.lines().find_map(parse_scontrol)
        {
            return Ok(Some(job));
        }
        let base: Vec<String> = ["-n", "-P", "-X", "-o", "State,ExitCode", "-j", id]
            .into_iter()
            .map(String::from)
            .collect();
        let out = self.run("sacct", &base, None).await?;
        if out.code == Some(0) && !out.stderr.contains("accounting storage is disabled") {
            return Ok(parse_sacct(&out.stdout));
        }
        let mut completion = vec!["-c".to_string()];
        completion.extend(base);
        let out = self.run("sacct", &completion, None).await?;
        Ok(if out.code == Some(0) {
            parse_sacct(&out.stdout)
        } else {
            None
        })
    }

    /// Cancels the job (`scancel`: SIGTERM to all its processes, SIGKILL after KillWait).
    pub async fn cancel(&self, id: &str) -> Result<()> {
        let out = self.run("scancel", &[id.into()], None).await?;
        if out.code == Some(0) {
            Ok(())
        } else {
            Err(refused_or_engine(
                &format!("cancel job {id} (scancel)"),
                &out,
            ))
        }
    }

    /// Cancels jobs by name (a foreground run whose id is not known yet).
    pub async fn cancel_by_name(&self, name: &str) -> Result<()> {
        let out = self
            .run("scancel", &[format!("--name={name}")], None)
            .await?;
        if out.code == Some(0) {
            Ok(())
        } else {
            Err(refused_or_engine(
                &format!("cancel job {name} (scancel)"),
                &out,
            ))
        }
    }
}

fn first_nonempty(texts: &[&str]) -> String {
    texts
        .iter()
        .map(|t| t.trim())
        .find(|t| !t.is_empty())
        .unwrap_or("no answer")
        .to_string()
}

/// A submission the controller refused (bad partition, too much memory...) is the
/// configuration's fault; anything else is the engine's.
fn refused_or_engine(action: &str, out: &ToolOutput) -> ExecError {
    let message = first_nonempty(&[&out.stderr, &out.stdout]);
    let lower = message.to_ascii_lowercase();
    let config_fault = [
        "invalid partition",
        "invalid account",
        "memory specification",
        "requested node configuration is not available",
        "invalid qos",
        "time limit",
    ]
    .iter()
    .any(|k| lower.contains(k));
    if config_fault {
        ExecError::Refused {
            backend: BackendKind::Slurm,
            message: format!("the cluster refused to {action}: {message}"),
        }
    } else {
        ExecError::Engine {
            backend: BackendKind::Slurm,
            action: action.to_string(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_lines_give_state_and_exit_code() {
        let line = "JobId=9 JobName=x UserId=root(0) JobState=CANCELLED Reason=None ExitCode=0:15 RunTime=00:00:03";
        let job = parse_scontrol(line).unwrap();
        assert_eq!(job.state, "CANCELLED");
        assert_eq!(job.exit, (0, 15));
        assert_eq!(job.exit_code(), 143);
        assert!(job.is_terminal());
        let running = parse_scontrol("JobId=1 JobState=RUNNING ExitCode=0:0").unwrap();
        assert!(!running.is_terminal());
    }

    #[test]
    fn sacct_rows_drop_the_cancelling_user() {
        let job = parse_sacct("CANCELLED by 0|0:15\n").unwrap();
        assert_eq!(job.state, "CANCELLED");
        assert_eq!(parse_sacct("FAILED|3:0").unwrap().exit_code(), 3);
        assert!(parse_sacct("").is_none());
    }

    #[test]
    fn parsable_submissions_may_name_a_cluster() {
        assert_eq!(parse_job_id("123\n").as_deref(), Some("123"));
        assert_eq!(parse_job_id("123;ci\n").as_deref(), Some("123"));
        assert_eq!(parse_job_id("Submitted batch job 1"), None);
    }
}
