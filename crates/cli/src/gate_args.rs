//! The guard's flags, shared by `nestbox exec` and `nestbox mcp`: hooks, the approval mode and
//! where "always" approvals live. They build a [`Gate`]; the decisions are `nestbox_exec`'s.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use nestbox_exec::{ApprovalMode, ApprovalStore, Descriptor, Gate, Hook, TerminalPrompt};
use nestbox_policy::units;

/// Hooks and approval (the "Guard" section of `--help`).
#[derive(Args, Debug, Clone)]
pub struct GateArgs {
    /// Run PROGRAM before every call: it reads the call as JSON on stdin and answers allow,
    /// deny or ask (repeatable; any deny wins; see examples/hooks/).
    #[arg(long = "hook", value_name = "PROGRAM", help_heading = "Guard")]
    pub hooks: Vec<PathBuf>,
    /// How long a hook may take; no answer in time is a deny.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        help_heading = "Guard"
    )]
    pub hook_timeout: String,
    /// Who approves what the guard flags: auto (interactive when stdin is a terminal, else
    /// deny), interactive, deny, approve. Hardline findings are refused in every mode.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "auto",
        help_heading = "Guard"
    )]
    pub approval: String,
    /// How long the interactive prompt waits; silence is a deny.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "120s",
        help_heading = "Guard"
    )]
    pub approval_timeout: String,
    /// The terminal the interactive prompt uses.
    #[arg(
        long,
        value_name = "DEVICE",
        default_value = "/dev/tty",
        help_heading = "Guard"
    )]
    pub prompt_tty: PathBuf,
    /// The file of "always" approvals [default: $XDG_DATA_HOME/nestbox/approvals.json].
    #[arg(long, value_name = "FILE", help_heading = "Guard")]
    pub approvals_file: Option<PathBuf>,
}

impl GateArgs {
    /// The approval mode asked for (`auto` resolved now).
    pub fn mode(&self) -> Result<ApprovalMode, String> {
        self.approval.parse()
    }

    /// The approvals file in use, if any.
    pub fn store(&self) -> Option<ApprovalStore> {
        self.approvals_file
            .clone()
            .or_else(ApprovalStore::default_path)
            .map(ApprovalStore::at)
    }

    /// Builds the gate for the backend `descriptor` describes, and prints its warnings.
    pub fn gate(&self, descriptor: &Descriptor) -> Result<Gate, String> {
        let mode = self.mode()?;
        let hook_timeout = units::parse_duration(&self.hook_timeout)
            .map_err(|e| format!("--hook-timeout: {e}"))?;
        let prompt_timeout = units::parse_duration(&self.approval_timeout)
            .map_err(|e| format!("--approval-timeout: {e}"))?;
        let hooks = self.hooks.iter().map(|p| Hook {
            program: p.clone(),
            timeout: hook_timeout,
        });
        let mut gate = Gate::new(mode, descriptor)
            .with_hooks(hooks)
            .with_approver(Arc::new(TerminalPrompt {
                device: self.prompt_tty.clone(),
                timeout: prompt_timeout,
            }));
        if let Some(store) = self.store() {
            gate = gate.with_store(store);
        }
        for w in gate.warnings() {
            crate::say_error(w);
        }
        Ok(gate)
    }
}
