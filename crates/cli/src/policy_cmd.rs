//! `nestbox policy check`: validate a policy file, a worker policy or a gateway policy.
//!
//! The kind is told by the file's top-level keys: `kind = "gateway"`, or any of `[[rule]]`,
//! `[[credential]]`, `[gateway]`, makes it a gateway policy; anything else is a worker policy.

use std::path::PathBuf;

use clap::Subcommand;
use nestbox_policy::gateway::{PolicyKind, load_gateway_file, policy_kind};
use nestbox_policy::{Policy, load_file};

use crate::say_error;

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file: syntax, unknown keys, values, and that every path exists (worker
    /// policy), or rules, credentials and endpoint ambiguity (gateway policy: a file with
    /// `kind = "gateway"`, `[[rule]]`, `[[credential]]` or `[gateway]`).
    ///
    /// Example: nestbox policy check worker.toml; nestbox policy check gateway.toml
    Check {
        file: PathBuf,
        /// Resolve relative paths against this directory (default: the current one).
        #[arg(long)]
        workdir: Option<PathBuf>,
    },
}

pub fn run(cmd: PolicyCommand) -> i32 {
    match cmd {
        PolicyCommand::Check { file, workdir } => {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if policy_kind(&text) == PolicyKind::Gateway {
                return check_gateway(&file);
            }
            let parsed = match load_file(&file) {
                Ok(p) => p,
                Err(e) => {
                    say_error(e);
                    return 125;
                }
            };
            let policy = Policy::effective(Some(parsed), Policy::default());
            let caller_env: Vec<_> = std::env::vars_os().collect();
            match nestbox_cage::plan::check_paths(&policy, workdir.as_deref(), &caller_env) {
                Ok(summary) => {
                    println!(
                        "{}: ok ({} filesystem entries resolve to {} paths; {} optional entries absent here)",
                        file.display(),
                        policy.fs.len(),
                        summary.resolved,
                        summary.skipped.len()
                    );
                    0
                }
                Err(e) => {
                    say_error(e);
                    125
                }
            }
        }
    }
}

fn check_gateway(file: &std::path::Path) -> i32 {
    match load_gateway_file(file) {
        Ok(p) => {
            for w in &p.warnings {
                eprintln!("nestbox: warning: {w}");
            }
            println!(
                "{}: ok (gateway policy: {} rules, {} credentials, {} warnings)",
                file.display(),
                p.rules.len(),
                p.credentials.len(),
                p.warnings.len()
            );
            0
        }
        Err(e) => {
            say_error(e);
            125
        }
    }
}
