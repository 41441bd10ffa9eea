//! The repository the step runs is hostile: its configuration files must not widen the
//! step's allowlist, and preset discovery (which asks pip, npm and friends) must never run its
//! code outside the cage.

use std::time::Duration;

use nestbox_testkit::http::{Body, HttpServer};

use crate::caged_curl;
use crate::common::*;

#[test]
fn a_repositorys_npmrc_and_cargo_config_do_not_widen_the_allowlist() {
    let s = Scratch::new();
    let local = HttpServer::start("127.0.0.2:0", Body::Text("a local service".into()));
    std::fs::write(
        s.path().join(".npmrc"),
        format!("registry=http://127.0.0.2:{}/\n", local.port()),
    )
    .unwrap();
    std::fs::create_dir(s.path().join(".cargo")).unwrap();
    std::fs::write(
        s.path().join(".cargo/config.toml"),
        "[registries.x]\nindex = \"sparse+http://169.254.169.254/latest/\"\n[source.y]\nregistry = \"https://exfil.example:8443/\"\n",
    )
    .unwrap();
    let url = local.url();
    assert_eq!(
        caged_curl(&s, &["--preset", "npm", "--preset", "crates"], &url),
        "403 X-Nestbox-Denied: ip_literal_not_allowed"
    );
    assert_eq!(local.requests(), 0);
    // The presets still work.
    let out = output_within(
        &mut s.nestbox(&["--preset", "npm", "--preset", "crates"], &["/bin/true"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // Control: the same URL is reachable when the user allows it explicitly.
    let allow = format!("127.0.0.2:{}", local.port());
    assert_eq!(caged_curl(&s, &["--allow", &allow], &url), "200");
}

#[test]
fn preset_discovery_never_runs_the_repositorys_code() {
    let s = Scratch::new();
    // A repository shipping a `pip` package: `python3 -m pip`, run in the repository, would
    // import it instead of the real pip.
    let marker = s.path().join("PWNED");
    std::fs::create_dir(s.path().join("pip")).unwrap();
    let payload = format!(
        "open({:?}, 'w').write('ran outside the cage')\n",
        marker.to_str().unwrap()
    );
    std::fs::write(s.path().join("pip/__init__.py"), &payload).unwrap();
    std::fs::write(s.path().join("pip/__main__.py"), &payload).unwrap();
    // Only python3 on PATH, so discovery falls through to `python3 -m pip`.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(PYTHON, bin.path().join("python3")).unwrap();
    let mut cmd = s.nestbox(&["--preset", "pypi"], &["/bin/true"]);
    cmd.current_dir(s.path()).env("PATH", bin.path());
    let out = output_within(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !marker.exists(),
        "the repository's code ran during discovery"
    );
    // Control: the attack is real for a tool that runs `python3 -m pip` in the repository.
    std::process::Command::new(PYTHON)
        .args(["-m", "pip", "config", "list"])
        .current_dir(s.path())
        .output()
        .unwrap();
    assert!(
        marker.exists(),
        "control: python3 -m pip in the repository imports its pip"
    );
}
