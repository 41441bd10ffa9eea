//! The run report: what was enforced for one step, in a form a program can check
//! (`nestbox run --report FILE`). Names of environment variables are listed, never values.

use serde::Serialize;

use crate::resolve::SkippedPath;
use crate::seccomp::FilterSummary;

/// One Landlock path rule as granted.
#[derive(Clone, Debug, Serialize)]
pub struct RuleReport {
    pub path: String,
    pub access: &'static str,
    pub rights: Vec<&'static str>,
    pub origin: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct LandlockReport {
    pub enforced: bool,
    pub kernel_abi: u32,
    pub abi: u32,
    pub handled_fs: Vec<&'static str>,
    pub rules: Vec<RuleReport>,
    pub skipped: Vec<SkippedPath>,
    /// TCP ports the step may connect to (empty: none). `null` when TCP is not restricted.
    pub tcp_connect: Option<Vec<u16>>,
    /// TCP ports the step may bind (empty: none).
    pub tcp_bind: Option<Vec<u16>>,
    pub scopes: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SeccompReport {
    pub enforced: bool,
    pub filter: Option<FilterSummary>,
}

/// How the step reaches the network.
#[derive(Clone, Debug, Serialize)]
pub struct NetworkReport {
    /// `none` (no network at all), `netns` or `port`.
    pub mode: String,
    /// Residual risks of this mode, in words.
    pub notes: Vec<String>,
    /// Details filled in by the relay integration (listener, allowlist, upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LimitReport {
    pub name: &'static str,
    pub value: u64,
    pub note: Option<String>,
}

/// How the step ended.
#[derive(Clone, Debug, Serialize)]
pub struct OutcomeReport {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u128,
    /// Processes still alive when the step's main process ended (or timed out), all killed.
    pub leftover_processes_killed: usize,
    /// The status `nestbox run` exits with.
    pub status: i32,
}

/// Everything enforced for one step.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub nestbox_version: &'static str,
    pub step_id: String,
    pub command: Vec<String>,
    pub program: String,
    pub workdir: String,
    pub tmpdir: String,
    pub keep_tmp: bool,
    pub uid: u32,
    pub gid: u32,
    pub landlock: LandlockReport,
    pub seccomp: SeccompReport,
    pub network: NetworkReport,
    /// Which processes the step can see, and what ends with it.
    pub processes: String,
    pub no_new_privs: bool,
    pub capabilities: String,
    pub env: Vec<String>,
    pub limits: Vec<LimitReport>,
    pub timeout_ms: Option<u128>,
    /// Protections the policy relies on that this kernel could not give (best effort only).
    pub dropped: Vec<String>,
    pub outcome: Option<OutcomeReport>,
}
