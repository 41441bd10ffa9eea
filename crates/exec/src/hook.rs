//! Hooks: the author's own programs that see every tool call before it runs and may allow it,
//! deny it, or send it to approval.
//!
//! # Protocol (version 1)
//!
//! For each tool call, nestbox starts every hook (`--hook PROGRAM`, repeatable; a program path,
//! not a shell line) at the same time, writes one JSON object and a newline to its standard
//! input, and closes it:
//!
//! ```json
//! {"version": 1, "event": "pre_tool_call",
//!  "session_id": "k3v9x2", "step_id": "k3v9x2-4",
//!  "tool": "run", "command": "git push origin main",
//!  "argv": ["sh", "-c", "git push origin main"],
//!  "workdir": "/work/repo", "timeout_ms": 600000, "background": false,
//!  "action": null, "job": null,
//!  "backend": {"kind": "local", "isolation": "cage", "target": "cage on this machine",
//!              "host_exposed": true, "confines": false},
//!  "guard": {"verdict": "clean", "findings": [], "parse_error": null},
//!  "approval_mode": "deny"}
//! ```
//!
//! `tool` is `run` or `process` (MCP) or `exec` (`nestbox exec`); a `process` call has
//! `action` (`list`, `poll`, `log`, `wait`, `kill`, `forget`) and `job` instead of a command.
//! `guard.findings` carry `id`, `tier`, `reason`, `matched`, `approval_key` and `confined`.
//!
//! The hook answers with one JSON object on standard output and exits 0:
//!
//! ```json
//! {"decision": "allow"}
//! {"decision": "deny", "reason": "no pushes to main from agents"}
//! {"decision": "ask", "reason": "touches the deploy scripts"}
//! ```
//!
//! Anything else is a **deny**: a hook that cannot be started, exits non-zero or is killed,
//! prints nothing, more than one object, text that is not JSON or a `decision` other than the
//! three, prints more than 64 KiB, or does not finish (and close its standard output) within
//! its timeout (10 s by default; then its whole process group is killed). Its standard error
//! goes to nestbox's standard error.
//!
//! # Several hooks
//!
//! All hooks run for every call, so each one sees (and can log) everything, including calls
//! that the guard or another hook refuses. Their answers combine in a fixed way: **any deny
//! wins** (the first in command-line order gives the reason), else **any ask** sends the call
//! to approval (with every asking hook's reason), else the call is allowed. A hook's allow
//! never overrides the guard: a hardline finding is refused whatever hooks say, and an
//! approval finding still needs approval.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::approval::ApprovalMode;
use crate::gate::{BackendSummary, GuardReport, ToolCall};

/// The protocol version sent in every request.
pub const PROTOCOL_VERSION: u32 = 1;
/// The most a hook may print.
const MAX_ANSWER: usize = 64 * 1024;

/// One hook program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The program (run directly, not through a shell).
    pub program: PathBuf,
    /// How long it may take before its answer counts as a deny.
    pub timeout: Duration,
}

impl Hook {
    /// A hook with the default timeout (10 s).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Hook {
            program: program.into(),
            timeout: Duration::from_secs(10),
        }
    }

    /// The name used in reasons and logs.
    pub fn name(&self) -> String {
        self.program.display().to_string()
    }
}

/// What every hook reads on standard input.
#[derive(Debug, Clone, Serialize)]
pub struct HookRequest {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// Always `pre_tool_call` in this version.
    pub event: &'static str,
    /// The session (one MCP server, one `nestbox exec`).
    pub session_id: String,
    /// This call, unique within the session.
    pub step_id: String,
    /// The call itself.
    #[serde(flatten)]
    pub call: ToolCall,
    /// Where it would run.
    pub backend: BackendSummary,
    /// What the guard found.
    pub guard: GuardReport,
    /// Who would answer an approval.
    pub approval_mode: ApprovalMode,
}

/// One hook's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDecision {
    /// Fine by this hook.
    Allow,
    /// Refuse, with why.
    Deny(String),
    /// Send to approval, with why.
    Ask(String),
}

/// The hooks' combined answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Combined {
    /// Every hook allowed (or there are none).
    Allow,
    /// A hook denied: which one, and why.
    Deny {
        /// The hook's name.
        hook: String,
        /// Its reason (or why its answer counted as a deny).
        reason: String,
    },
    /// No hook denied and some asked: each asking hook and its reason.
    Ask(Vec<(String, String)>),
}

#[derive(Deserialize)]
struct Wire {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

/// Parses a hook's standard output. Exactly one JSON object with a known `decision`.
pub fn parse_answer(out: &[u8]) -> Result<HookDecision, String> {
    let text = std::str::from_utf8(out).map_err(|_| "its answer is not UTF-8".to_string())?;
    if text.trim().is_empty() {
        return Err("it printed no answer".into());
    }
    let not_an_answer = |e: String| {
        let shown: String = text.trim().chars().take(120).collect();
        format!("its answer is not a hook answer ({e}): {shown:?}")
    };
    let value: serde_json::Value =
        serde_json::from_str(text.trim()).map_err(|e| not_an_answer(e.to_string()))?;
    if !value.is_object() {
        return Err(not_an_answer("not a JSON object".into()));
    }
    let wire: Wire = serde_json::from_value(value).map_err(|e| not_an_answer(e.to_string()))?;
    let reason = wire.reason.filter(|r| !r.trim().is_empty());
    match wire.decision.as_str() {
        "allow" => Ok(HookDecision::Allow),
        "deny" => Ok(HookDecision::Deny(
            reason.unwrap_or_else(|| "denied (no reason given)".into()),
        )),
        "ask" => {
            Ok(HookDecision::Ask(reason.unwrap_or_else(|| {
                "asks for approval (no reason given)".into()
            })))
        }
        other => Err(format!(
            "its decision `{other}` is none of allow, deny, ask"
        )),
    }
}

/// Runs one hook on `request` and returns its decision; every failure is a deny that says
/// what went wrong.
pub async fn run_hook(hook: &Hook, request: &[u8]) -> HookDecision {
    match tokio::time::timeout(hook.timeout, exchange(hook, request)).await {
        Ok(Ok((0, out))) => parse_answer(&out).unwrap_or_else(|why| {
            HookDecision::Deny(format!("hook {} failed: {why}", hook.name()))
        }),
        Ok(Ok((code, _))) => HookDecision::Deny(format!(
            "hook {} failed: it exited with status {code}",
            hook.name()
        )),
        Ok(Err(why)) => HookDecision::Deny(format!("hook {} failed: {why}", hook.name())),
        Err(_) => HookDecision::Deny(format!(
            "hook {} failed: no answer within {} ms",
            hook.name(),
            hook.timeout.as_millis()
        )),
    }
}

/// Starts the hook, feeds it the request, reads its answer and waits for it to exit. The
/// child is killed (with its process group) if this future is dropped, e.g. by the timeout.
async fn exchange(hook: &Hook, request: &[u8]) -> Result<(i32, Vec<u8>), String> {
    let mut child = tokio::process::Command::new(&hook.program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("NESTBOX_HOOK_PROTOCOL", PROTOCOL_VERSION.to_string())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("it could not be started: {e}"))?;
    let group = GroupKiller(child.id().map(|p| p as i32));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let feed = async {
        // A hook may decide without reading its input; a closed pipe is not its fault.
        let _ = stdin.write_all(request).await;
        let _ = stdin.write_all(b"\n").await;
        drop(stdin);
    };
    let read = async {
        let mut out = Vec::new();
        let mut limited = (&mut stdout).take(MAX_ANSWER as u64 + 1);
        limited
            .read_to_end(&mut out)
            .await
            .map_err(|e| format!("reading its answer: {e}"))?;
        if out.len() > MAX_ANSWER {
            return Err(format!("it printed more than {MAX_ANSWER} bytes"));
        }
        Ok(out)
    };
    let ((), out) = tokio::join!(feed, read);
    let out = out?;
    let status = child
        .wait()
        .await
        .map_err(|e| format!("waiting for it: {e}"))?;
    std::mem::forget(group);
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok((code, out))
}

/// Kills a hook's whole process group when dropped (the hook timed out while running).
struct GroupKiller(Option<i32>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) on the process group the hook leads (process_group(0)).
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Runs every hook on `request` at the same time and combines their answers (see the module
/// documentation).
pub async fn run_all(hooks: &[Hook], request: &HookRequest) -> Combined {
    if hooks.is_empty() {
        return Combined::Allow;
    }
    let body = serde_json::to_vec(request).expect("hook requests serialize");
    let answers = futures_util::future::join_all(hooks.iter().map(|h| run_hook(h, &body))).await;
    combine(hooks.iter().map(Hook::name).zip(answers))
}

/// Combines answers given in hook order: any deny wins, else any ask, else allow.
pub fn combine(answers: impl IntoIterator<Item = (String, HookDecision)>) -> Combined {
    let mut asks = Vec::new();
    for (hook, decision) in answers {
        match decision {
            HookDecision::Deny(reason) => return Combined::Deny { hook, reason },
            HookDecision::Ask(reason) => asks.push((hook, reason)),
            HookDecision::Allow => {}
        }
    }
    if asks.is_empty() {
        Combined::Allow
    } else {
        Combined::Ask(asks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_answers_parse() {
        assert_eq!(
            parse_answer(br#"{"decision":"allow"}"#),
            Ok(HookDecision::Allow)
        );
        assert_eq!(
            parse_answer(b" {\"decision\":\"deny\",\"reason\":\"main\"}\n"),
            Ok(HookDecision::Deny("main".into()))
        );
        assert!(matches!(
            parse_answer(br#"{"decision":"ask","extra":1}"#),
            Ok(HookDecision::Ask(_))
        ));
    }

    #[test]
    fn garbage_answers_are_errors() {
        for bad in [
            &b""[..],
            b"allow",
            b"{\"decision\":\"maybe\"}",
            b"{\"decision\":\"allow\"}{\"decision\":\"allow\"}",
            b"{\"reason\":\"x\"}",
            b"\xff\xfe",
            b"[\"allow\"]",
        ] {
            assert!(
                parse_answer(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn any_deny_wins_over_asks_and_allows() {
        let c = combine([
            ("a".to_string(), HookDecision::Ask("x".into())),
            ("b".to_string(), HookDecision::Allow),
            ("c".to_string(), HookDecision::Deny("no".into())),
            ("d".to_string(), HookDecision::Deny("later".into())),
        ]);
        assert_eq!(
            c,
            Combined::Deny {
                hook: "c".into(),
                reason: "no".into()
            }
        );
    }

    #[test]
    fn any_ask_without_a_deny_sends_to_approval() {
        let c = combine([
            ("a".to_string(), HookDecision::Allow),
            ("b".to_string(), HookDecision::Ask("why".into())),
        ]);
        assert_eq!(c, Combined::Ask(vec![("b".into(), "why".into())]));
        assert_eq!(
            combine([("a".to_string(), HookDecision::Allow)]),
            Combined::Allow
        );
    }
}
