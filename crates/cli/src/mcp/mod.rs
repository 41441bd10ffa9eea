//! `nestbox mcp`: nestbox as an MCP tool server over stdio. An agent (Claude Code, Codex,
//! Hermes, any MCP client) gets two tools, `run` and `process`; every call goes through the
//! guard, the hooks and approval, then runs on the configured backend. Standard output carries
//! protocol frames only; everything else goes to standard error.

mod protocol;
mod tools;

pub use tools::Defaults;

use std::sync::Arc;

use clap::Args;
use nestbox_exec::Session;

use crate::exec_cmd::ExecArgs;
use crate::say_error;

/// The flags of `nestbox mcp`: the backend's (as for `nestbox exec`), the guard's, and the
/// shell that runs command lines.
#[derive(Args, Debug)]
#[command(
    mut_arg("poll", |a| a.hide(true)),
    mut_arg("output", |a| a.hide(true)),
    mut_arg("stream", |a| a.hide(true)),
    mut_arg("offset", |a| a.hide(true)),
    mut_arg("limit", |a| a.hide(true)),
    mut_arg("wait", |a| a.hide(true)),
    mut_arg("kill", |a| a.hide(true)),
    mut_arg("forget", |a| a.hide(true)),
    mut_arg("background", |a| a.hide(true)),
    mut_arg("json", |a| a.hide(true)),
    mut_arg("command", |a| a.hide(true)),
    after_help = "Examples:
  nestbox mcp --backend local --policy worker.toml
  nestbox mcp --backend docker --image localhost/busybox --hook ./examples/hooks/guard-push.py
  nestbox mcp --config exec.toml --approval interactive --prompt-tty /dev/pts/3

Add it to a client (Claude Code):
  claude mcp add nestbox -- nestbox mcp --backend local --policy worker.toml

Tools: run (command, workdir, timeout, background) and process (list, poll, log, wait, kill,
forget). --timeout and --env apply to every command; --workdir is the default directory.

Approval: the default (auto) is deny here, since stdin is the client's pipe: whatever needs
approval is refused, hardline findings always are. --approval interactive asks on the
terminal (--prompt-tty); --approval approve lets approvable findings through (batch runs).
Nothing but MCP frames is written to stdout; logs go to stderr."
)]
pub struct McpArgs {
    #[command(flatten)]
    exec: ExecArgs,
    /// The shell that runs the `run` tool's command lines (`SHELL -c LINE`).
    #[arg(long, value_name = "PROGRAM", default_value = "sh")]
    shell: String,
}

/// Runs the MCP server until the client closes standard input; returns the exit status.
pub fn run(args: McpArgs) -> i32 {
    let flags = &args.exec.flags;
    if !flags.command.is_empty()
        || flags.background
        || flags.json
        || [
            &flags.poll,
            &flags.output,
            &flags.wait,
            &flags.kill,
            &flags.forget,
        ]
        .iter()
        .any(|o| o.is_some())
    {
        say_error(
            "nestbox mcp takes no command, job operation, --background or --json: the agent sends those as tool calls",
        );
        return 2;
    }
    let config = match crate::exec_cmd::config_from_flags(flags) {
        Ok(c) => c,
        Err(e) => {
            say_error(&e);
            return e.exit_code();
        }
    };
    let defaults = match crate::exec_cmd::server_defaults(flags) {
        Ok(d) => d,
        Err(e) => {
            say_error(&e);
            return e.exit_code();
        }
    };
    let served = nestbox_exec::block_on(async {
        let backend = nestbox_exec::open(&config)
            .await
            .map_err(|e| (e.to_string(), e.exit_code()))?;
        let gate = flags.gate.gate(backend.descriptor()).map_err(|e| (e, 2))?;
        let d = backend.descriptor();
        eprintln!(
            "nestbox mcp: serving on stdio: backend {} ({}), approval {}, {} hook(s), session {}",
            d.kind,
            d.target,
            gate.mode(),
            flags.gate.hooks.len(),
            gate.session_id()
        );
        let instructions = format!(
            "Commands run on nestbox's {} backend ({}). Dangerous commands are refused or need approval (mode: {}); a refusal names the rule and must not be worked around.",
            d.kind,
            d.target,
            gate.mode()
        );
        let session = Session::new(backend, gate).with_shell(vec![args.shell.clone(), "-c".into()]);
        let tools = Arc::new(tools::Tools::new(session, defaults));
        protocol::serve(tools.clone(), instructions)
            .await
            .map_err(|e| (format!("reading MCP frames: {e}"), 125))?;
        if let Ok(tools) = Arc::try_unwrap(tools) {
            let _ = tools.close().await;
        }
        Ok::<(), (String, i32)>(())
    });
    match served {
        Ok(()) => 0,
        Err((msg, code)) => {
            say_error(msg);
            code
        }
    }
}
