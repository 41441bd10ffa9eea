//! The command line describes itself: completions and man pages generated from the clap
//! definitions, and an example in every command's help.

use std::process::Command;
use std::time::Duration;

use crate::*;

fn nestbox_out(args: &[&str]) -> String {
    let out = output_within(Command::new(nestbox()).args(args), Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn completions_for_each_shell_know_the_mcp_command_and_its_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = nestbox_out(&["completions", shell]);
        assert!(script.contains("mcp"), "{shell}");
        assert!(script.contains("approval"), "{shell}");
    }
}

#[test]
fn the_man_page_renders_and_one_page_per_command_can_be_written() {
    let page = nestbox_out(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH nestbox 1"),
        "{page:.200}"
    );
    let dir = tempfile::tempdir().unwrap();
    nestbox_out(&["man", "--dir", dir.path().to_str().unwrap()]);
    let mcp = std::fs::read_to_string(dir.path().join("nestbox-mcp.1")).unwrap();
    assert!(mcp.contains("approval"));
}

#[test]
fn every_command_shows_an_example_in_its_help() {
    let top = nestbox_out(&["--help"]);
    assert!(top.contains("Examples:"));
    for cmd in [
        "run",
        "exec",
        "mcp",
        "probe",
        "policy",
        "relay",
        "presets",
        "completions",
        "man",
    ] {
        let help = nestbox_out(&[cmd, "--help"]);
        assert!(
            help.contains("Example"),
            "nestbox {cmd} --help has no example:\n{help}"
        );
    }
}
