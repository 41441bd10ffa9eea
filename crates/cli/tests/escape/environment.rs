//! The caller's environment (tokens, agent settings, its virtualenv on PATH) never reaches the
//! step unless named.

use std::process::Command;

use crate::common::*;

#[test]
fn callers_secrets_in_the_environment_do_not_leak() {
    let s = Scratch::new();
    let mut cmd = s.nestbox(&[], &["/usr/bin/env"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-leak-me")
        .env("AWS_SECRET_ACCESS_KEY", "aws-leak-me")
        .env("PATH", "/opt/agent/.venv/bin:/usr/bin:/bin")
        .env_remove("TERM");
    let out = output_within(&mut cmd, std::time::Duration::from_secs(30));
    let env = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!env.contains("leak-me"), "secret leaked:\n{env}");
    assert!(
        !env.contains(".venv"),
        "agent venv leaked into PATH:\n{env}"
    );
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|p| p.0))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["HOME", "LANG", "PATH", "TMPDIR"],
        "only the documented variables:\n{env}"
    );

    // Control: the same variables are there without the cage.
    let control = Command::new("/usr/bin/env")
        .env("ANTHROPIC_API_KEY", "sk-ant-leak-me")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&control.stdout).contains("sk-ant-leak-me"));
}

#[test]
fn named_variables_pass_and_set_values_apply() {
    let s = Scratch::new();
    let mut cmd = s.nestbox(&["--env", "CI", "--env", "MODE=caged"], &["/usr/bin/env"]);
    cmd.env("CI", "true").env("OTHER", "x");
    let out = output_within(&mut cmd, std::time::Duration::from_secs(30));
    let env = stdout(&out);
    assert!(env.lines().any(|l| l == "CI=true"), "{env}");
    assert!(env.lines().any(|l| l == "MODE=caged"), "{env}");
    assert!(!env.contains("OTHER="), "{env}");
}
