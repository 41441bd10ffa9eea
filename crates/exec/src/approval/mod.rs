//! Approval: who may let a command with guard findings run, and what a "yes" covers.
//!
//! Three modes ([`ApprovalMode`]):
//!
//! * `interactive`: a person answers a prompt on the terminal ([`TerminalPrompt`], on
//!   `/dev/tty`, never on standard output, which may carry protocol frames). The choices are
//!   once, session, always and deny. There is no default: Enter alone asks again, and silence
//!   until the timeout is a deny.
//! * `deny`: nobody can answer (no terminal, a sub-agent, cron, CI), so whatever needs approval
//!   is refused. [`ApprovalMode::auto`] picks it whenever standard input is not a terminal.
//! * `approve`: an explicit opt-in for batch runs: whatever *can* be approved is. Hardline
//!   findings still stop the command, and so does a hook's deny.
//!
//! An "always" answer stores the guard's [approval key](crate::guard::ApprovalKey) for each
//! finding, the precise command pattern, in an [`ApprovalStore`] (a file under nestbox's
//! data directory, mode 0600). It never stores a whole class: approving
//! `git push --force origin feature` for ever does not approve a force push to `main`.
//!
//! Backends that expose nothing of the host need fewer prompts: see [`confinement`] for which
//! findings a sandbox with no host exposure makes moot, and why the rest still ask.

pub mod confinement;
mod prompt;
mod store;

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

pub use prompt::{TerminalPrompt, converse};
pub use store::{ApprovalStore, StoredApproval};

use crate::backend::BoxFuture;

/// Who answers when a command needs approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Ask a person on the terminal; silence is a deny.
    Interactive,
    /// Refuse whatever needs approval: nobody is there to answer.
    Deny,
    /// Approve whatever can be approved (never hardline findings, never a hook's deny).
    Approve,
}

impl ApprovalMode {
    /// `interactive` when a person is plausibly at this process's terminal (standard input is a
    /// terminal and `/dev/tty` opens), else `deny`. An MCP server's standard input is the
    /// client's pipe, so it gets `deny` unless told otherwise.
    pub fn auto() -> ApprovalMode {
        // SAFETY: isatty on a file descriptor number has no memory effects.
        let stdin_tty = unsafe { libc::isatty(0) } == 1;
        let tty_opens = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .is_ok();
        if stdin_tty && tty_opens {
            ApprovalMode::Interactive
        } else {
            ApprovalMode::Deny
        }
    }

    /// The mode's name, as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            ApprovalMode::Interactive => "interactive",
            ApprovalMode::Deny => "deny",
            ApprovalMode::Approve => "approve",
        }
    }
}

impl fmt::Display for ApprovalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ApprovalMode {
    type Err = String;

    /// Parses `interactive`, `deny`, `approve` or `auto` (resolved at once by
    /// [`ApprovalMode::auto`]). Anything else is an error, never a default.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interactive" => Ok(ApprovalMode::Interactive),
            "deny" => Ok(ApprovalMode::Deny),
            "approve" => Ok(ApprovalMode::Approve),
            "auto" => Ok(ApprovalMode::auto()),
            _ => Err(format!(
                "`{s}` is not an approval mode (auto, interactive, deny, approve)"
            )),
        }
    }
}

/// A person's answer to an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// Run this call only.
    Once,
    /// Run it, and let the same findings through for the rest of this session.
    Session,
    /// Run it, and store the findings' approval keys so they pass from now on.
    Always,
    /// Do not run it.
    Deny,
}

/// What came back from asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The person chose.
    Chose(Choice),
    /// Nobody answered before the timeout (a deny).
    TimedOut,
    /// There was nobody to ask: no terminal, or it closed (a deny), with why.
    Unavailable(String),
}

/// One thing the person is asked to approve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingItem {
    /// Who raised it: a guard rule id (`git.force_push`) or `hook <program>`.
    pub source: String,
    /// Why it needs approval.
    pub reason: String,
    /// The part of the command it is about (empty for a hook's ask).
    pub matched: String,
}

/// Everything an [`Approver`] shows the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The step the call will be (as hooks and logs see it).
    pub step_id: String,
    /// The tool the agent called (`run`, `process`, `exec`).
    pub tool: String,
    /// What will run, or the job operation, in one line for people.
    pub summary: String,
    /// Where it will run (`docker: container 3f2a...`).
    pub backend: String,
    /// What needs a yes.
    pub items: Vec<PendingItem>,
    /// False when "session" and "always" cannot be offered (a hook asked: hooks decide
    /// afresh on every call, so only a yes for this call makes sense).
    pub can_remember: bool,
}

/// Asks someone whether a call may run. [`TerminalPrompt`] asks a person at the terminal;
/// a library caller can plug in its own (a chat message, a web page).
pub trait Approver: Send + Sync {
    /// Asks, and waits for the answer. Must return [`Answer::TimedOut`] rather than wait for
    /// ever, and must never treat "no answer" as a yes.
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Answer>;
}
