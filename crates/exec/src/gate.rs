//! The gate: the one decision every tool call goes through before a backend sees it.
//!
//! ```text
//! tool call ── guard (classify the command) ── hooks (all of them, every call)
//!    hardline finding ............................ refused, whatever hooks or modes say
//!    a hook denies ............................... refused, with the hook's reason
//!    findings the backend confines ............... waived (approval::confinement)
//!    findings approved before (session, always) .. let through
//!    what is left, plus hooks' asks .............. the approval mode decides:
//!        deny: refused   approve: let through   interactive: a person answers
//! ```
//!
//! [`Session`](crate::Session) calls [`Gate::check`] for every run, spawn and job operation;
//! a library caller that drives a backend itself can call it the same way.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::approval::{
    Answer, ApprovalMode, ApprovalRequest, ApprovalStore, Approver, Choice, PendingItem,
    TerminalPrompt, confinement,
};
use crate::backend::{BackendKind, Descriptor, ExposureSource, Isolation};
use crate::guard::{self, ApprovalKey, Finding, Tier};
use crate::hook::{self, Combined, Hook, HookRequest};

/// A tool call as the gate and the hooks see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolCall {
    /// The tool the agent called: `run` or `process` (MCP), `exec` (`nestbox exec`).
    pub tool: String,
    /// The shell command text the guard judges (absent for job operations).
    pub command: Option<String>,
    /// The argument vector the backend will run.
    pub argv: Option<Vec<String>>,
    /// The working directory asked for (inside the sandbox).
    pub workdir: Option<String>,
    /// The timeout asked for, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// True when the command starts as a background job.
    pub background: bool,
    /// For job operations: `list`, `poll`, `log`, `wait`, `kill`, `forget`.
    pub action: Option<String>,
    /// For job operations: the job id.
    pub job: Option<String>,
}

impl ToolCall {
    /// One line for people: the command, or the job operation.
    pub fn summary(&self) -> String {
        match (&self.command, &self.action) {
            (Some(c), _) => c.clone(),
            (None, Some(a)) => match &self.job {
                Some(j) => format!("{a} {j}"),
                None => a.clone(),
            },
            (None, None) => self.tool.clone(),
        }
    }
}

/// One guard finding, as hooks, logs and refusals show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingReport {
    /// The rule id (`git.force_push`).
    pub id: &'static str,
    /// `approval` or `hardline`.
    pub tier: &'static str,
    /// What the command would do.
    pub reason: String,
    /// The part of the command that triggered the rule.
    pub matched: String,
    /// What an "always" stores for it (`None` for hardline).
    pub approval_key: Option<String>,
    /// True when this backend confines its effect, so it needs no approval here.
    pub confined: bool,
}

/// What the guard found in a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuardReport {
    /// `clean`, `approval` or `hardline`.
    pub verdict: &'static str,
    /// Every finding, in the order the shell would reach it.
    pub findings: Vec<FindingReport>,
    /// Set when the command could not be analysed (it then needs approval).
    pub parse_error: Option<String>,
}

/// The backend, as hooks see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendSummary {
    /// Which backend.
    pub kind: BackendKind,
    /// How it separates the command from its machine.
    pub isolation: Isolation,
    /// Where commands run, for people.
    pub target: String,
    /// True when any host path is reachable from inside (or could not be ruled out).
    pub host_exposed: bool,
    /// True when the backend confines local effects (see [`confinement::confines`]).
    pub confines: bool,
}

impl BackendSummary {
    /// The summary of a backend's descriptor.
    pub fn of(d: &Descriptor) -> Self {
        BackendSummary {
            kind: d.kind,
            isolation: d.isolation,
            target: d.target.clone(),
            host_exposed: d.host_exposure.exposed || !d.host_exposure.notes.is_empty(),
            confines: confinement::confines(d),
        }
    }
}

/// How a call that runs got through, from least to most intervention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClearedBy {
    /// Nothing needed approval.
    Clean,
    /// Every finding was confined by the backend.
    Confined,
    /// Every remaining finding was approved earlier (this session, or "always").
    Remembered,
    /// `--approval approve` let it through.
    ApproveMode,
    /// A person approved this call once.
    Once,
    /// A person approved it for the session.
    Session,
    /// A person approved it for ever (the keys are stored).
    Always,
}

/// The gate's yes: the call may run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Clearance {
    /// The step id hooks saw.
    pub step_id: String,
    /// What the guard found (empty for a clean call).
    pub findings: Vec<FindingReport>,
    /// How it got through.
    pub cleared_by: ClearedBy,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DenialCause {
    /// A hardline finding: nothing can approve it.
    Hardline,
    /// A hook denied it (or failed, which counts as a deny).
    Hook {
        /// The hook's program.
        hook: String,
    },
    /// It needs approval and the mode is `deny`.
    NeedsApproval,
    /// A person answered deny.
    UserDenied,
    /// Nobody answered the prompt in time.
    ApprovalTimeout,
    /// It needs approval and there was nobody to ask (no terminal).
    NoOneToAsk,
}

/// The gate's no: the call does not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// The step id hooks saw.
    pub step_id: String,
    /// Why, as data.
    pub cause: DenialCause,
    /// Why, for the agent and the person: what was refused, and what (not) to do next.
    pub message: String,
    /// What the guard found.
    pub findings: Vec<FindingReport>,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Denial {}

/// Guard, hooks and approval for one session. Cheap to share between concurrent calls.
pub struct Gate {
    mode: ApprovalMode,
    hooks: Vec<Hook>,
    store: Option<ApprovalStore>,
    approver: Arc<dyn Approver>,
    descriptor: Descriptor,
    backend: BackendSummary,
    session_id: String,
    next_step: AtomicU64,
    session_keys: Mutex<HashSet<ApprovalKey>>,
    prompt: tokio::sync::Mutex<()>,
    warnings: Vec<String>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("mode", &self.mode)
            .field("hooks", &self.hooks)
            .field("store", &self.store)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate for the backend `descriptor` describes, in `mode`, with no hooks, no
    /// "always" store and the terminal prompt on `/dev/tty` as the approver.
    pub fn new(mode: ApprovalMode, descriptor: &Descriptor) -> Self {
        Gate {
            mode,
            hooks: Vec::new(),
            store: None,
            approver: Arc::new(TerminalPrompt::default()),
            descriptor: descriptor.clone(),
            backend: BackendSummary::of(descriptor),
            session_id: crate::job::random_token(4),
            next_step: AtomicU64::new(0),
            session_keys: Mutex::new(HashSet::new()),
            prompt: tokio::sync::Mutex::new(()),
            warnings: Vec::new(),
        }
    }

    /// Adds hooks, run for every call in this order.
    pub fn with_hooks(mut self, hooks: impl IntoIterator<Item = Hook>) -> Self {
        self.hooks.extend(hooks);
        self
    }

    /// Uses `store` for "always" approvals, unless the backend can write to it: a store the
    /// sandboxed command could edit would let it approve itself, so it is then ignored (and
    /// [`warnings`](Self::warnings) says so).
    pub fn with_store(mut self, store: ApprovalStore) -> Self {
        match writable_exposure_over(&self.descriptor, store.path()) {
            Some(host) => self.warnings.push(format!(
                "not using the approvals file {}: the {} backend can write {host}, which holds it; \"always\" acts as \"session\"",
                store.path().display(),
                self.descriptor.kind
            )),
            None => self.store = Some(store),
        }
        self
    }

    /// Uses `approver` instead of the terminal prompt in interactive mode.
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// The approval mode.
    pub fn mode(&self) -> ApprovalMode {
        self.mode
    }

    /// This session's id (the prefix of every step id).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The backend as hooks see it.
    pub fn backend(&self) -> &BackendSummary {
        &self.backend
    }

    /// Things the caller should tell the person (e.g. an approvals file that was not used).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Decides whether `call` may run: guard, then hooks, then approval (see the module
    /// documentation). Never runs the call itself.
    pub async fn check(&self, call: &ToolCall) -> Result<Clearance, Denial> {
        let step_id = format!(
            "{}-{}",
            self.session_id,
            self.next_step.fetch_add(1, Ordering::Relaxed) + 1
        );
        let verdict = call
            .command
            .as_deref()
            .map(guard::classify)
            .unwrap_or_default();
        let findings: Vec<FindingReport> =
            verdict.findings.iter().map(|f| self.report(f)).collect();
        let request = HookRequest {
            version: hook::PROTOCOL_VERSION,
            event: "pre_tool_call",
            session_id: self.session_id.clone(),
            step_id: step_id.clone(),
            call: call.clone(),
            backend: self.backend.clone(),
            guard: GuardReport {
                verdict: match verdict.tier() {
                    None if verdict.parse_error.is_some() => "approval",
                    None => "clean",
                    Some(Tier::Approval) => "approval",
                    Some(Tier::Hardline) => "hardline",
                },
                findings: findings.clone(),
                parse_error: verdict.parse_error.clone(),
            },
            approval_mode: self.mode,
        };
        let hooks = hook::run_all(&self.hooks, &request).await;
        let deny = |cause: DenialCause, message: String| Denial {
            step_id: step_id.clone(),
            cause,
            message,
            findings: findings.clone(),
        };

        if verdict.is_hardline() {
            let what: Vec<String> = verdict
                .findings
                .iter()
                .filter(|f| f.tier == Tier::Hardline)
                .map(|f| format!("{} ({}, in `{}`)", f.id, f.reason, f.matched))
                .collect();
            return Err(deny(
                DenialCause::Hardline,
                format!(
                    "refused by the guard: {}. This is a hardline rule: no approval can allow it. Do not retry, rephrase or reach the same effect another way.",
                    what.join("; ")
                ),
            ));
        }
        let asks = match hooks {
            Combined::Deny { hook, reason } => {
                return Err(deny(
                    DenialCause::Hook { hook: hook.clone() },
                    format!("refused by hook {hook}: {reason}"),
                ));
            }
            Combined::Ask(asks) => asks,
            Combined::Allow => Vec::new(),
        };

        let mut cleared_by = ClearedBy::Clean;
        let mut pending: Vec<(&Finding, ApprovalKey)> = Vec::new();
        for f in &verdict.findings {
            if confinement::waives(&self.descriptor, f) {
                cleared_by = cleared_by.max(ClearedBy::Confined);
                continue;
            }
            let key = f.approval_key().expect("not hardline");
            if self.remembered(&key) {
                cleared_by = cleared_by.max(ClearedBy::Remembered);
            } else {
                pending.push((f, key));
            }
        }
        if pending.is_empty() && asks.is_empty() {
            return Ok(Clearance {
                step_id,
                findings,
                cleared_by,
            });
        }
        let what = describe_pending(&pending, &asks);
        match self.mode {
            ApprovalMode::Approve => Ok(Clearance {
                step_id,
                findings,
                cleared_by: ClearedBy::ApproveMode,
            }),
            ApprovalMode::Deny => Err(deny(
                DenialCause::NeedsApproval,
                format!(
                    "refused: this needs approval ({what}) and nobody can approve it here (approval mode `deny`). Do not retry it or reach the same effect another way; tell the user what you wanted to run and why."
                ),
            )),
            ApprovalMode::Interactive => {
                // One prompt at a time on the terminal; and the answer to the previous one may
                // already cover this call.
                let _turn = self.prompt.lock().await;
                pending.retain(|(_, k)| !self.remembered(k));
                if pending.is_empty() && asks.is_empty() {
                    return Ok(Clearance {
                        step_id,
                        findings,
                        cleared_by: ClearedBy::Remembered,
                    });
                }
                let items = pending
                    .iter()
                    .map(|(f, _)| PendingItem {
                        source: f.id.to_string(),
                        reason: f.reason.clone(),
                        matched: f.matched.clone(),
                    })
                    .chain(asks.iter().map(|(h, r)| PendingItem {
                        source: format!("hook {h}"),
                        reason: r.clone(),
                        matched: String::new(),
                    }))
                    .collect();
                let request = ApprovalRequest {
                    step_id: step_id.clone(),
                    tool: call.tool.clone(),
                    summary: call.summary(),
                    backend: format!("{}: {}", self.backend.kind, self.backend.target),
                    items,
                    can_remember: asks.is_empty(),
                };
                let keys: Vec<ApprovalKey> = pending.into_iter().map(|(_, k)| k).collect();
                match self.approver.ask(&request).await {
                    Answer::Chose(Choice::Once) => Ok(Clearance {
                        step_id,
                        findings,
                        cleared_by: ClearedBy::Once,
                    }),
                    Answer::Chose(Choice::Session) => {
                        self.remember_for_session(&keys);
                        Ok(Clearance {
                            step_id,
                            findings,
                            cleared_by: ClearedBy::Session,
                        })
                    }
                    Answer::Chose(Choice::Always) => {
                        self.remember_for_session(&keys);
                        match &self.store {
                            Some(store) => {
                                if let Err(e) = store.add(&keys, &call.summary()) {
                                    eprintln!(
                                        "nestbox: could not store the approval (it holds for this session only): {e}"
                                    );
                                }
                            }
                            None => eprintln!(
                                "nestbox: no approvals file in use: the approval holds for this session only"
                            ),
                        }
                        Ok(Clearance {
                            step_id,
                            findings,
                            cleared_by: ClearedBy::Always,
                        })
                    }
                    Answer::Chose(Choice::Deny) => Err(deny(
                        DenialCause::UserDenied,
                        format!(
                            "refused: the user denied it at the approval prompt ({what}). Do not retry it or reach the same effect another way."
                        ),
                    )),
                    Answer::TimedOut => Err(deny(
                        DenialCause::ApprovalTimeout,
                        format!(
                            "refused: nobody answered the approval prompt in time ({what}); silence is a deny."
                        ),
                    )),
                    Answer::Unavailable(why) => Err(deny(
                        DenialCause::NoOneToAsk,
                        format!(
                            "refused: this needs approval ({what}) and there is nobody to ask: {why}."
                        ),
                    )),
                }
            }
        }
    }

    fn report(&self, f: &Finding) -> FindingReport {
        FindingReport {
            id: f.id,
            tier: match f.tier {
                Tier::Approval => "approval",
                Tier::Hardline => "hardline",
            },
            reason: f.reason.clone(),
            matched: f.matched.clone(),
            approval_key: f.approval_key().map(|k| k.as_str().to_owned()),
            confined: confinement::waives(&self.descriptor, f),
        }
    }

    fn remembered(&self, key: &ApprovalKey) -> bool {
        if self
            .session_keys
            .lock()
            .expect("session keys")
            .contains(key)
        {
            return true;
        }
        match &self.store {
            Some(store) => store.contains(key).unwrap_or_else(|e| {
                eprintln!("nestbox: ignoring stored approvals: {e}");
                false
            }),
            None => false,
        }
    }

    fn remember_for_session(&self, keys: &[ApprovalKey]) {
        self.session_keys
            .lock()
            .expect("session keys")
            .extend(keys.iter().cloned());
    }
}

/// "git.force_push in `git push -f`; hook ./h.py: why" for refusals.
fn describe_pending(pending: &[(&Finding, ApprovalKey)], asks: &[(String, String)]) -> String {
    pending
        .iter()
        .map(|(f, _)| format!("{}: {}, in `{}`", f.id, f.reason, f.matched))
        .chain(asks.iter().map(|(h, r)| format!("hook {h} asks: {r}")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The writable host path of the backend that contains `file`, if any.
fn writable_exposure_over(d: &Descriptor, file: &Path) -> Option<String> {
    let file = absolute(file);
    d.host_exposure
        .paths
        .iter()
        // A remote account's paths are on another machine, not where this file is.
        .filter(|p| !p.read_only && p.via != ExposureSource::RemoteAccount)
        .find(|p| file.starts_with(absolute(Path::new(&p.host))))
        .map(|p| p.host.clone())
}

/// Resolves what can be resolved (the file may not exist yet: its nearest existing parent).
fn absolute(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
    let mut out = existing.canonicalize().unwrap_or(existing);
    for name in rest.into_iter().rev() {
        out.push(name);
    }
    out
}
