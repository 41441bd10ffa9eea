//! Chaining: inside an outer sandbox that forces traffic through a proxy, the relay chains to
//! it (explicitly, or by default from the launcher's HTTPS_PROXY) and the step still reaches
//! only its own allowlist. Proxy credentials never reach the step.

use std::time::Duration;

use nestbox_testkit::http::{Body, HttpServer};
use nestbox_testkit::tinyproxy::Tinyproxy;

use crate::caged_curl;
use crate::common::*;

#[test]
fn the_relay_chains_through_an_explicit_upstream() {
    let s = Scratch::new();
    let proxy = Tinyproxy::start(None);
    let srv = HttpServer::start("127.0.0.2:0", Body::Text("via upstream".into()));
    let allow = format!("127.0.0.2:{}", srv.port());
    let up = proxy.url();
    assert_eq!(
        caged_curl(&s, &["--allow", &allow, "--upstream", &up], &srv.url()),
        "200"
    );
    assert!(
        proxy.log_text().contains("127.0.0.2"),
        "tinyproxy carried it: {}",
        proxy.log_text()
    );
    // The allowlist still applies before the upstream.
    assert_eq!(
        caged_curl(
            &s,
            &["--allow", &allow, "--upstream", &up],
            "http://elsewhere.invalid/"
        ),
        "403 X-Nestbox-Denied: host_not_allowed"
    );
}

#[test]
fn the_relay_chains_through_the_launchers_https_proxy_by_default() {
    let s = Scratch::new();
    let proxy = Tinyproxy::start(None);
    let srv = HttpServer::start("127.0.0.2:0", Body::Text("x".into()));
    let allow = format!("127.0.0.2:{}", srv.port());
    let report = s.path().join("r.json");
    let mut cmd = s.nestbox(
        &["--allow", &allow, "--report", report.to_str().unwrap()],
        &["/bin/sh", "-c", "curl -sS --proxytunnel \"$0\"", &srv.url()],
    );
    cmd.env("HTTPS_PROXY", proxy.url());
    let out = output_within(&mut cmd, Duration::from_secs(60));
    assert_eq!(stdout(&out), "x", "{}", stderr(&out));
    assert!(proxy.log_text().contains("CONNECT"), "{}", proxy.log_text());
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        r["network"]["relay"]["upstream_source"],
        "launcher environment (HTTPS_PROXY)"
    );

    // --no-upstream: dial directly, tinyproxy sees nothing more.
    let before = proxy.log_text().matches("CONNECT").count();
    let mut cmd = s.nestbox(
        &["--allow", &allow, "--no-upstream"],
        &["/bin/sh", "-c", "curl -sS --proxytunnel \"$0\"", &srv.url()],
    );
    cmd.env("HTTPS_PROXY", proxy.url());
    let out = output_within(&mut cmd, Duration::from_secs(60));
    assert_eq!(stdout(&out), "x", "{}", stderr(&out));
    assert_eq!(proxy.log_text().matches("CONNECT").count(), before);
}

#[test]
fn an_upstream_that_is_down_gives_a_clear_502() {
    let s = Scratch::new();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("http://127.0.0.1:{}", dead.local_addr().unwrap().port());
    drop(dead);
    let out = output_within(
        &mut s.nestbox(
            &["--allow", "127.0.0.2:80", "--upstream", &up],
            &[
                "/bin/sh",
                "-c",
                "curl -sS -i http://127.0.0.2/ 2>&1 | tr -d '\\r'",
            ],
        ),
        Duration::from_secs(60),
    );
    let text = stdout(&out);
    assert!(text.contains("502"), "{text}");
    assert!(text.contains(&up), "names the upstream: {text}");
}

#[test]
fn upstream_credentials_never_reach_the_step() {
    let s = Scratch::new();
    let proxy = Tinyproxy::start(Some(("agent", "s3cretpw")));
    let srv = HttpServer::start("127.0.0.2:0", Body::Text("authorized".into()));
    let allow = format!("127.0.0.2:{}", srv.port());
    let up = format!("http://agent:s3cretpw@127.0.0.1:{}", proxy.port);
    // `s3cret[p]w` matches the secret but not itself, so the grep's own command line, which
    // the search also reads, does not count.
    let script = "curl -sS \"$0\"; echo; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 's3cret[p]w'; env | grep -c 's3cret[p]w'; cat /proc/*/environ 2>/dev/null | grep -c 's3cret[p]w'";
    // The upstream comes from the launcher's environment, the way to hand nestbox a secret:
    // a command line is readable by every process on the machine.
    let mut cmd = s.nestbox(&["--allow", &allow], &["/bin/sh", "-c", script, &srv.url()]);
    cmd.env("HTTPS_PROXY", &up);
    let out = output_within(&mut cmd, Duration::from_secs(60));
    // The credentials worked (tinyproxy let the request through) and appear nowhere the step
    // can look: not in any process's command line, not in its environment.
    assert_eq!(stdout(&out), "authorized\n0\n0\n0\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("s3cretpw"));
}

#[test]
fn a_proxy_password_on_the_command_line_is_blanked_in_the_launchers_own_arguments() {
    let s = Scratch::new();
    let t = unique_sleep();
    let mut launcher = s
        .nestbox(
            &[
                "--allow",
                "127.0.0.2:9",
                "--upstream",
                "http://agent:s3cretpw@127.0.0.1:9",
            ],
            &["/bin/sh", "-c", &format!("exec sleep {t}")],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::eventually(Duration::from_secs(20), "the step", || {
        processes_with(&format!("sleep {t}")).len() == 1
    });
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", launcher.id())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    assert!(
        cmdline.contains("http://agent:********@127.0.0.1:9"),
        "{cmdline}"
    );
    assert!(!cmdline.contains("s3cretpw"), "{cmdline}");
}
