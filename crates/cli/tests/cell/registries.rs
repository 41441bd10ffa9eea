//! Real clients through the relay to the real package registries this machine reaches. Few
//! and tolerant of a slow registry, but real: each one also shows that without the preset the
//! same client has no network.

use std::time::Duration;

use crate::common::*;

const SLOW: Duration = Duration::from_secs(240);

#[test]
fn curl_reaches_pypi_only_with_the_preset() {
    let s = Scratch::new();
    let cmd = [
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "https://pypi.org/simple/six/",
    ];
    let out = output_within(&mut s.nestbox(&["--preset", "pypi"], &cmd), SLOW);
    assert_eq!(stdout(&out), "200", "{}", stderr(&out));
    let out = output_within(&mut s.nestbox(&[], &cmd), SLOW);
    assert_ne!(out.status.code(), Some(0), "no network without the preset");
}

#[test]
fn pip_downloads_a_package_through_the_relay() {
    let s = Scratch::new();
    let out = output_within(
        &mut s.nestbox(
            &["--preset", "pypi"],
            &[
                PYTHON,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-cache-dir",
                "-d",
                "wheels",
                "six==1.16.0",
            ],
        ),
        SLOW,
    );
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let wheels: Vec<_> = std::fs::read_dir(s.path().join("wheels"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(wheels.len(), 1, "one wheel downloaded");
}

#[test]
fn npm_queries_the_registry_through_the_relay() {
    let s = Scratch::new();
    let out = output_within(
        &mut s.nestbox(
            &["--preset", "npm"],
            &["npm", "view", "is-number@7.0.0", "version"],
        ),
        SLOW,
    );
    assert_eq!(stdout(&out).trim(), "7.0.0", "{}", stderr(&out));
}

#[test]
fn cargo_fetches_a_crate_into_an_empty_cargo_home() {
    let s = Scratch::new();
    std::fs::write(
        s.path().join("Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\nitoa = \"=1.0.11\"\n",
    )
    .unwrap();
    std::fs::create_dir(s.path().join("src")).unwrap();
    std::fs::write(s.path().join("src/lib.rs"), "").unwrap();
    let cargo = which("cargo");
    let home = std::env::var("HOME").unwrap();
    let rustup = std::env::var("RUSTUP_HOME").unwrap_or(format!("{home}/.rustup"));
    let cargo_bin = std::path::Path::new(&cargo)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let out = output_within(
        &mut s.nestbox(
            &[
                "--preset",
                "crates",
                "--exec",
                &cargo_bin,
                "--exec",
                &rustup,
                "--env",
                &format!("RUSTUP_HOME={rustup}"),
                "--env",
                "RUSTUP_TOOLCHAIN",
            ],
            &[
                "/bin/sh",
                "-c",
                "CARGO_HOME=$TMPDIR/cargo \"$0\" fetch && ls $TMPDIR/cargo/registry/cache/*/",
                &cargo,
            ],
        ),
        SLOW,
    );
    assert!(
        stdout(&out).contains("itoa-1.0.11.crate"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
}

fn which(name: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .unwrap();
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!path.is_empty(), "{name} not found on PATH");
    path
}
