//! `nestbox`: the command line. Thin by design: parsing, wiring and printing; the decisions
//! live in the library crates (policy, cage, net, exec).

mod policy_cmd;
mod probe_cmd;
mod run_cmd;

use clap::{Parser, Subcommand};

/// A sandbox runtime for AI agents that run untrusted code.
#[derive(Parser)]
#[command(name = "nestbox", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one command as a caged step (Landlock + seccomp, private temp dir, clean environment).
    ///
    /// Example: nestbox run -- pytest -q
    Run(run_cmd::RunArgs),
    /// Show what this kernel offers and what `run` will enforce.
    ///
    /// Example: nestbox probe --json
    Probe(probe_cmd::ProbeArgs),
    /// Validate or inspect policy files.
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCommand),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => run_cmd::run(args),
        Command::Probe(args) => probe_cmd::run(args),
        Command::Policy(cmd) => policy_cmd::run(cmd),
    };
    std::process::exit(code);
}

/// Prints a one-line refusal or failure in the form every nestbox error takes.
pub(crate) fn say_error(message: impl std::fmt::Display) {
    eprintln!("nestbox: {message}");
}
