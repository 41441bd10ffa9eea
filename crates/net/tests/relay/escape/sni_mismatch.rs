//! A tunnel opened to one host cannot carry a TLS session for another (domain fronting): the
//! relay reads the ClientHello before anything reaches the server.

use std::io::{Read, Write};

use crate::support::hello::client_hello;
use crate::support::servers::Echo;
use crate::support::{Relay, assert_closed};

fn relay_for(echo: &Echo) -> Relay {
    let p = echo.port();
    Relay::builder()
        .allow(&format!("front.test:{p}"))
        .allow(&format!("127.0.0.1:{p}"))
        .resolve("front.test=127.0.0.1")
        .audit()
        .start()
}

#[test]
fn relay_closes_a_tunnel_whose_client_hello_names_another_host() {
    let echo = Echo::start();
    let mut relay = relay_for(&echo);
    let (mut s, r) = relay.connect_to(&format!("front.test:{}", echo.port()));
    assert_eq!(r.status, 200);
    s.write_all(&client_hello(Some("hidden.example"))).unwrap();
    assert_closed(&mut s);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        echo.received(),
        0,
        "no byte of the ClientHello reached the server"
    );

    let lines = relay.audit_lines();
    let line = lines
        .iter()
        .find(|l| l["reason"] == "sni_mismatch")
        .expect("audit line");
    assert_eq!(line["decision"], "deny");
    assert!(
        line["detail"].as_str().unwrap().contains("hidden.example"),
        "{line}"
    );
}

#[test]
fn relay_passes_a_client_hello_naming_the_connect_host() {
    // control: same relay, same tunnel, matching server name
    let echo = Echo::start();
    let relay = relay_for(&echo);
    let (mut s, r) = relay.connect_to(&format!("front.test:{}", echo.port()));
    assert_eq!(r.status, 200);
    let hello = client_hello(Some("Front.Test"));
    s.write_all(&hello).unwrap();
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, hello, "the echo server got the ClientHello");
}

#[test]
fn relay_closes_a_tunnel_to_an_ip_whose_client_hello_names_a_host() {
    let echo = Echo::start();
    let relay = relay_for(&echo);
    let (mut s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200);
    s.write_all(&client_hello(Some("front.test"))).unwrap();
    assert_closed(&mut s);
    assert_eq!(echo.received(), 0);
}

#[test]
fn relay_passes_a_client_hello_without_server_name_and_non_tls_bytes() {
    let echo = Echo::start();
    let relay = relay_for(&echo);
    let (mut s, _) = relay.connect_to(&format!("front.test:{}", echo.port()));
    let hello = client_hello(None);
    s.write_all(&hello).unwrap();
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).unwrap();
    let (mut s, _) = relay.connect_to(&format!("front.test:{}", echo.port()));
    crate::support::assert_echoes(&mut s);
}

#[test]
fn relay_closes_a_tunnel_whose_client_hello_is_malformed() {
    let echo = Echo::start();
    let relay = relay_for(&echo);
    let (mut s, _) = relay.connect_to(&format!("front.test:{}", echo.port()));
    let mut hello = client_hello(Some("front.test"));
    hello[5] = 2; // handshake type: not a ClientHello
    s.write_all(&hello).unwrap();
    assert_closed(&mut s);
    assert_eq!(echo.received(), 0);
}

#[test]
fn relay_checks_a_client_hello_sent_in_single_bytes() {
    let echo = Echo::start();
    let relay = relay_for(&echo);
    let (mut s, _) = relay.connect_to(&format!("front.test:{}", echo.port()));
    s.set_nodelay(true).unwrap();
    for b in client_hello(Some("hidden.example")) {
        if s.write_all(&[b]).is_err() {
            break;
        }
    }
    assert_closed(&mut s);
    assert_eq!(echo.received(), 0);
}

/// curl (OpenSSL) through the relay to a real TLS server; `--connect-to` makes curl open the
/// tunnel to one name while its TLS session (SNI, certificate check, Host) is for another:
/// domain fronting done by a real client.
#[test]
fn relay_stops_domain_fronting_by_a_real_tls_client() {
    use crate::support::tls::TlsServer;
    use std::process::Command;

    let tls = TlsServer::start();
    let p = tls.port;
    let mut relay = Relay::builder()
        .allow(&format!("name.test:{p}"))
        .allow(&format!("127.0.0.1:{p}"))
        .resolve("name.test=127.0.0.1")
        .resolve("other.test=127.0.0.1")
        .audit()
        .start();
    let proxy = format!("http://{}", relay.addr);
    let curl = |args: &[&str]| {
        Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "--noproxy", "", "--cacert"])
            .arg(&tls.ca)
            .args(args)
            .output()
            .expect("curl is installed")
    };

    // control: TLS to the name the tunnel was opened for works end to end
    let ok = curl(&["-x", &proxy, &format!("https://name.test:{p}/")]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    // control: without the relay, the fronted request succeeds (the certificate covers both)
    let direct = curl(&[
        "--resolve",
        &format!("other.test:{p}:127.0.0.1"),
        &format!("https://other.test:{p}/"),
    ]);
    assert!(
        direct.status.success(),
        "{}",
        String::from_utf8_lossy(&direct.stderr)
    );

    // the probe: tunnel to name.test, TLS for other.test
    let fronted = curl(&[
        "-x",
        &proxy,
        "--connect-to",
        &format!("other.test:{p}:name.test:{p}"),
        &format!("https://other.test:{p}/"),
    ]);
    assert!(!fronted.status.success(), "the fronted request must fail");

    let lines = relay.audit_lines();
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "sni_mismatch")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:#?}");
    assert_eq!(refused[0]["host"], "name.test");
    assert!(
        refused[0]["detail"]
            .as_str()
            .unwrap()
            .contains("other.test")
    );
}
