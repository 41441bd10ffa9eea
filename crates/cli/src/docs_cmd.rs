//! `nestbox completions SHELL` and `nestbox man`: generated from the clap definitions, so
//! they never drift from the flags.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory, ValueEnum};

/// The shells completions can be generated for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    /// bash (source it, or put it in /etc/bash_completion.d/).
    Bash,
    /// zsh (put it on $fpath as _nestbox).
    Zsh,
    /// fish (put it in ~/.config/fish/completions/).
    Fish,
}

/// `nestbox completions`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  nestbox completions bash > /etc/bash_completion.d/nestbox
  nestbox completions zsh > \"${fpath[1]}/_nestbox\"
  nestbox completions fish > ~/.config/fish/completions/nestbox.fish")]
pub struct CompletionsArgs {
    /// The shell.
    shell: Shell,
}

/// `nestbox man`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  nestbox man | man -l -
  nestbox man --dir /usr/local/share/man/man1     # nestbox.1 and nestbox-<command>.1")]
pub struct ManArgs {
    /// Write nestbox.1 and one page per command into DIR instead of printing nestbox.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script; returns the exit status.
pub fn completions(args: CompletionsArgs) -> i32 {
    let mut cmd = crate::Cli::command();
    let out = &mut std::io::stdout();
    match args.shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "nestbox", out)
        }
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "nestbox", out),
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, "nestbox", out)
        }
    }
    0
}

/// Prints or writes the man pages; returns the exit status.
pub fn man(args: ManArgs) -> i32 {
    let cmd = crate::Cli::command();
    let result = match &args.dir {
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .and_then(|_| std::io::stdout().write_all(&buf))
        }
        Some(dir) => write_pages(cmd, dir),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            crate::say_error(format!("writing the man page: {e}"));
            125
        }
    }
}

fn write_pages(cmd: clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd;
    cmd.build();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // clap wants a 'static name; this runs once, in a short-lived command.
        let name: &'static str = Box::leak(format!("nestbox-{}", sub.get_name()).into_boxed_str());
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub.clone().name(name)).render(&mut buf)?;
        std::fs::write(dir.join(format!("{name}.1")), buf)?;
    }
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut buf)?;
    std::fs::write(dir.join("nestbox.1"), buf)
}
