//! `nestbox policy check` on gateway policies: ambiguity per caller, positions, unknown keys.

use std::process::Command;
use std::time::Duration;

use crate::common::{nestbox_bin, output_within, stderr, stdout};

fn check(text: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, text).unwrap();
    output_within(
        Command::new(nestbox_bin())
            .args(["policy", "check"])
            .arg(&file),
        Duration::from_secs(10),
    )
}

const AMBIGUOUS: &str = r#"[[rule]]
name = "model"
cell = "worker"
hosts = ["api.example.com"]
tls = "inspect"

[[rule]]
name = "everyone"
any = true
hosts = ["*.example.com"]
tls = "passthrough"
"#;

#[test]
fn policy_check_reports_endpoint_ambiguity_naming_both_rules_and_the_field() {
    let out = check(AMBIGUOUS);
    assert_eq!(out.status.code(), Some(125));
    let e = stderr(&out);
    assert!(e.contains("gateway.toml:11:7: endpoint ambiguity"), "{e}");
    assert!(
        e.contains("rule `model`") && e.contains("rule `everyone`"),
        "{e}"
    );
    assert!(
        e.contains("tls = \"inspect\"") && e.contains("tls = \"passthrough\""),
        "{e}"
    );
}

#[test]
fn policy_check_lets_two_different_callers_treat_one_host_differently() {
    let text = AMBIGUOUS.replace("any = true", "program = \"/usr/bin/git\"");
    let out = check(&text);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("ok (gateway policy: 2 rules"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn policy_check_refuses_unknown_keys_with_their_position() {
    let out =
        check("[[rule]]\nname = \"a\"\nany = true\nhosts = [\"a.example\"]\ntsl = \"inspect\"\n");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("gateway.toml:5:1"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("tsl"), "{}", stderr(&out));
}

#[test]
fn the_shipped_example_gateway_policy_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/gateway.toml");
    let out = output_within(
        Command::new(nestbox_bin()).args(["policy", "check", example]),
        Duration::from_secs(10),
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn worker_policies_are_still_checked_as_worker_policies() {
    let out = check("[fs]\nread = [\"/usr\"]\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("filesystem entries"),
        "{}",
        stdout(&out)
    );
}
