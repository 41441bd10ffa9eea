//! The audit log: one parseable JSON line per decision, with the fields the launcher reports.

use std::io::{Read, Write};

use crate::support::Relay;
use crate::support::servers::Echo;
use nestbox_testkit::http::{Body, HttpServer};

#[test]
fn relay_writes_one_audit_line_per_decision() {
    let echo = Echo::start();
    let http = HttpServer::start("127.0.0.1:0", Body::Text("0123456789".into()));
    let mut relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .allow(&format!("127.0.0.1:{}", http.port()))
        .deny("blocked.example")
        .step("step-42")
        .audit()
        .start();

    let (mut s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200);
    s.write_all(&[7u8; 1000]).unwrap();
    let mut back = [0u8; 1000];
    s.read_exact(&mut back).unwrap();
    drop(s);
    let (_s, r) =
        relay.send(format!("GET http://127.0.0.1:{}/f HTTP/1.1\r\n\r\n", http.port()).as_bytes());
    assert_eq!(r.status, 200);
    let (_s, r) = relay.connect_to("blocked.example:443");
    assert_eq!(r.status, 403);
    let (_s, r) = relay.connect_to("unlisted.example:443");
    assert_eq!(r.status, 403);
    std::thread::sleep(std::time::Duration::from_millis(200));

    let lines = relay.audit_lines();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for l in &lines {
        assert_eq!(l["step"], "step-42");
        let t = l["time"].as_str().unwrap();
        assert!(
            t.len() == 24 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
        assert!(l["duration_ms"].is_u64());
    }
    let tunnel = lines
        .iter()
        .find(|l| l["method"] == "CONNECT" && l["decision"] == "allow")
        .expect("tunnel line");
    assert_eq!(tunnel["host"], "127.0.0.1");
    assert_eq!(tunnel["port"], echo.port());
    assert_eq!(tunnel["addr"], echo.addr.to_string());
    assert_eq!(tunnel["bytes_up"], 1000);
    assert_eq!(tunnel["bytes_down"], 1000);
    assert_eq!(tunnel["status"], 200);
    assert!(
        tunnel["rule"].as_str().unwrap().contains("flag --allow"),
        "{tunnel}"
    );

    let fetch = lines
        .iter()
        .find(|l| l["method"] == "GET")
        .expect("fetch line");
    assert_eq!(fetch["decision"], "allow");
    assert!(fetch["bytes_down"].as_u64().unwrap() > 10);

    let denied = lines
        .iter()
        .find(|l| l["reason"] == "denied_by_rule")
        .expect("deny line");
    assert_eq!(denied["decision"], "deny");
    assert_eq!(denied["host"], "blocked.example");
    assert!(
        denied["rule"].as_str().unwrap().contains("blocked.example"),
        "{denied}"
    );
    assert!(denied["addr"].is_null());

    let unlisted = lines
        .iter()
        .find(|l| l["reason"] == "host_not_allowed")
        .expect("not-listed line");
    assert_eq!(unlisted["status"], 403);
}

#[test]
fn relay_writes_audit_lines_for_tunnels_still_open_when_it_stops() {
    let echo = Echo::start();
    let mut relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .audit()
        .start();
    let (mut s, _) = relay.connect_to(&echo.addr.to_string());
    crate::support::assert_echoes(&mut s);
    let lines = relay.audit_lines(); // stops the relay with the tunnel open
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["decision"], "allow");
    assert!(lines[0]["bytes_up"].as_u64().unwrap() > 0);
    drop(s);
}

#[test]
fn relay_writes_no_line_for_a_connection_that_sent_nothing() {
    let mut relay = Relay::builder().audit().start();
    drop(relay.connect());
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(relay.audit_lines().is_empty());
}
