//! The relay as the only exit, in both modes: allowed hosts are reached, others get the
//! relay's 403, and a program that ignores the proxy variables reaches nothing.

use std::time::Duration;

use nestbox_testkit::http::{Body, HttpServer};

use crate::common::*;
use crate::{caged_curl, eventually};

fn server(addr: &str) -> HttpServer {
    HttpServer::start(addr, Body::Text("hello through the relay".into()))
}

fn allowed_host_is_reached(mode: &str) {
    let s = Scratch::new();
    let srv = server("127.0.0.2:0");
    let allow = format!("127.0.0.2:{}", srv.port());
    let out = output_within(
        &mut s.nestbox(
            &["--net-mode", mode, "--allow", &allow],
            &[
                "/bin/sh",
                "-c",
                "curl -sS \"$0\" && echo && curl -sS --proxytunnel \"$0\"",
                &srv.url(),
            ],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(
        stdout(&out),
        "hello through the relay\nhello through the relay",
        "{}",
        stderr(&out)
    );
    assert_eq!(srv.requests(), 2);
    // The plain-HTTP request arrived in origin form, with Host set by the relay.
    assert!(
        srv.heads()[0].starts_with("GET / HTTP/1.1\r\n"),
        "{:?}",
        srv.heads()
    );
}

#[test]
fn netns_mode_reaches_an_allowed_host_through_the_relay() {
    allowed_host_is_reached("netns");
}

#[test]
fn port_mode_reaches_an_allowed_host_through_the_relay() {
    allowed_host_is_reached("port");
}

#[test]
fn a_host_not_on_the_list_gets_the_relays_403() {
    let s = Scratch::new();
    let allowed = server("127.0.0.2:0");
    let other = server("127.0.0.3:0");
    let allow = format!("127.0.0.2:{}", allowed.port());
    assert_eq!(
        caged_curl(&s, &["--allow", &allow], "http://blocked.invalid/"),
        "403 X-Nestbox-Denied: host_not_allowed"
    );
    assert_eq!(
        caged_curl(&s, &["--allow", &allow], &other.url()),
        "403 X-Nestbox-Denied: ip_literal_not_allowed"
    );
    assert_eq!(other.requests(), 0);
    // Control: the allowed one, in the same configuration.
    assert_eq!(caged_curl(&s, &["--allow", &allow], &allowed.url()), "200");
}

#[test]
fn deny_wins_over_allow() {
    let s = Scratch::new();
    let srv = server("127.0.0.2:0");
    let allow = format!("127.0.0.2:{}", srv.port());
    assert_eq!(
        caged_curl(&s, &["--allow", &allow, "--deny", "127.0.0.2"], &srv.url()),
        "403 X-Nestbox-Denied: denied_by_rule"
    );
}

fn ignoring_the_proxy(mode: &str) -> (String, String) {
    let s = Scratch::new();
    let srv = server("127.0.0.2:0");
    let allow = format!("127.0.0.2:{}", srv.port());
    let port = srv.port().to_string();
    let direct = s.probe_inside(
        &["--net-mode", mode, "--allow", &allow],
        &["tcp", "127.0.0.2", &port],
    );
    let outside = s.probe_inside(
        &["--net-mode", mode, "--allow", &allow],
        &["tcp", "203.0.113.80", "443"],
    );
    // Control: the same connect from outside the cage reaches the server.
    assert_eq!(s.probe_outside(&["tcp", "127.0.0.2", &port]), "OK");
    (direct, outside)
}

#[test]
fn in_netns_mode_a_program_ignoring_the_proxy_has_no_network() {
    let (direct, outside) = ignoring_the_proxy("netns");
    // The step's namespace holds only lo: nothing listens there but the relay.
    assert_eq!(direct, "ERR ECONNREFUSED");
    assert_eq!(outside, "ERR ENETUNREACH");
}

#[test]
fn in_port_mode_a_program_ignoring_the_proxy_is_refused_by_landlock() {
    let (direct, outside) = ignoring_the_proxy("port");
    assert_eq!(direct, "ERR EACCES");
    assert_eq!(outside, "ERR EACCES");
}

#[test]
fn netns_steps_may_run_their_own_local_servers() {
    let s = Scratch::new();
    let srv = server("127.0.0.2:0");
    let allow = format!("127.0.0.2:{}", srv.port());
    // A test suite binding 127.0.0.1 and talking to itself: fine inside its own namespace.
    let script = "import socket\nl=socket.socket(); l.bind(('127.0.0.1',0)); l.listen()\nc=socket.create_connection(l.getsockname()); print('OK')";
    let out = output_within(
        &mut s.nestbox(
            &["--net-mode", "netns", "--allow", &allow],
            &[PYTHON, "-c", script],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(stdout(&out).trim(), "OK", "{}", stderr(&out));
}

#[test]
fn the_report_describes_the_network() {
    let s = Scratch::new();
    let report = s.path().join("r.json");
    let audit = s.path().join("audit.jsonl");
    let srv = server("127.0.0.2:0");
    let allow = format!("127.0.0.2:{}", srv.port());
    for mode in ["netns", "port"] {
        let out = output_within(
            &mut s.nestbox(
                &[
                    "--net-mode",
                    mode,
                    "--allow",
                    &allow,
                    "--report",
                    report.to_str().unwrap(),
                    "--audit",
                    audit.to_str().unwrap(),
                ],
                &[
                    "/bin/sh",
                    "-c",
                    "curl -sS -o /dev/null \"$0\"; curl -sS -o /dev/null http://nope.invalid/",
                    &srv.url(),
                ],
            ),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(r["network"]["mode"], mode);
        assert_eq!(r["network"]["relay"]["allow"][0], allow.as_str());
        assert!(
            r["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == "https_proxy")
        );
        let notes = r["network"]["notes"].to_string();
        if mode == "port" {
            assert!(notes.contains("cannot tell hosts apart"), "{notes}");
            assert_eq!(r["landlock"]["tcp_connect"].as_array().unwrap().len(), 1);
        } else {
            assert!(notes.contains("only lo"), "{notes}");
        }
    }
    let mut lines = Vec::new();
    eventually(Duration::from_secs(5), "audit lines", || {
        lines = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect();
        lines.len() >= 4
    });
    let decisions: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(decisions.iter().any(|d| d["decision"] == "allow"));
    assert!(
        decisions
            .iter()
            .any(|d| d["decision"] == "deny" && d["host"] == "nope.invalid")
    );
    assert!(
        decisions
            .iter()
            .all(|d| d["step"].as_str().is_some_and(|s| s.len() == 16))
    );
}
