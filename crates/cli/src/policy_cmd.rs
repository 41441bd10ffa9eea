//! `nestbox policy check|show`: validate a policy file, or print the effective policy.

use std::path::PathBuf;

use clap::Subcommand;
use nestbox_policy::{Policy, load_file};

use crate::say_error;

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file: syntax, unknown keys, values, and that every path exists.
    ///
    /// Example: nestbox policy check worker.toml
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
