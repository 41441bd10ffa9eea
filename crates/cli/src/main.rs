//! `nestbox`: the command line. Thin by design: parsing, wiring and printing; the decisions
//! live in the library crates (policy, cage, net, exec).

mod argv;
mod docs_cmd;
mod exec_cmd;
mod gate_args;
mod gateway_cmd;
mod mcp;
mod policy_cmd;
mod probe_cmd;
mod progress;
mod relay_cmd;
mod run_cmd;

use clap::{Parser, Subcommand};

/// A sandbox runtime for AI agents that run untrusted code.
#[derive(Parser)]
#[command(
    name = "nestbox",
    version,
    about,
    long_about = None,
    after_help = "Examples:
  nestbox run -- pytest -q                                  # one caged step, default policy
  nestbox exec --backend docker --image localhost/busybox -- make test
  nestbox mcp --backend local --policy worker.toml          # tools for an agent, over MCP
  nestbox probe --json                                      # what this kernel can enforce
  nestbox completions bash > /etc/bash_completion.d/nestbox
  nestbox man | man -l -

Exit status: the command's own; 124 on timeout; 125 when nestbox refused or failed."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one command as a caged step (Landlock + seccomp, private temp dir, clean environment).
    ///
    /// Example: nestbox run -- pytest -q
    Run(Box<run_cmd::RunArgs>),
    /// Run a command on a backend (local cage, Docker/Podman, SSH, Apptainer, Slurm, Modal,
    /// Daytona) and get the same typed result everywhere; long jobs in the background.
    ///
    /// Example: nestbox exec --backend docker --image localhost/busybox -- sh -c 'make test'
    Exec(exec_cmd::ExecArgs),
    /// Serve the run and process tools to an agent over MCP (stdio), every call guarded.
    ///
    /// Example: claude mcp add nestbox -- nestbox mcp --backend local --policy worker.toml
    Mcp(Box<mcp::McpArgs>),
    /// Show what this kernel offers and what `run` will enforce.
    ///
    /// Example: nestbox probe --json
    Probe(probe_cmd::ProbeArgs),
    /// Validate or inspect policy files.
    ///
    /// Example: nestbox policy check worker.toml
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCommand),
    /// Run a relay: the allowlisting CONNECT proxy that is a step's one network exit.
    ///
    /// `nestbox run --allow` starts one per step by itself; run it by hand for the relay alone.
    /// Example: nestbox relay --listen 127.0.0.1:8080 --allow pypi.org --preset npm
    Relay(Box<relay_cmd::RelayArgs>),
    /// List network presets and what each expands to on this machine.
    ///
    /// Example: nestbox presets pypi npm
    Presets(relay_cmd::PresetsArgs),
    /// Print a shell completion script (bash, zsh, fish).
    ///
    /// Example: nestbox completions bash > /etc/bash_completion.d/nestbox
    Completions(docs_cmd::CompletionsArgs),
    /// Print the man page (or write one per command with --dir).
    ///
    /// Example: nestbox man | man -l -
    Man(docs_cmd::ManArgs),
    /// Run the gateway (the egress proxy that holds credentials), or ask a running one.
    ///
    /// Example: nestbox gateway --policy gateway.toml
    Gateway(Box<gateway_cmd::GatewayArgs>),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => run_cmd::run(*args),
        Command::Exec(args) => exec_cmd::run(args),
        Command::Mcp(args) => mcp::run(*args),
        Command::Probe(args) => probe_cmd::run(args),
        Command::Policy(cmd) => policy_cmd::run(cmd),
        Command::Relay(args) => relay_cmd::run(*args),
        Command::Presets(args) => relay_cmd::presets(args),
        Command::Completions(args) => docs_cmd::completions(args),
        Command::Man(args) => docs_cmd::man(args),
        Command::Gateway(args) => gateway_cmd::run(*args),
    };
    std::process::exit(code);
}

/// Prints a one-line refusal or failure in the form every nestbox error takes.
pub(crate) fn say_error(message: impl std::fmt::Display) {
    eprintln!("nestbox: {message}");
}
