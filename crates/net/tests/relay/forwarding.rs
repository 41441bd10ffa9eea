//! What the relay lets through works: tunnels, plain-HTTP fetches, real clients.

use std::io::{Read, Write};
use std::process::Command;

use crate::support::servers::{Blackhole, Echo};
use crate::support::{Relay, assert_echoes, assert_refused, read_response};
use nestbox_testkit::http::{Body, HttpServer};

#[test]
fn relay_tunnels_connect_to_an_allowed_address() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .start();
    let (mut s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200, "{r:?}");
    assert_echoes(&mut s);
}

#[test]
fn relay_tunnels_connect_to_an_allowed_name_resolving_to_an_allowed_address() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("echo.test:{}", echo.port()))
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .resolve("echo.test=127.0.0.1")
        .start();
    let (mut s, r) = relay.connect_to(&format!("ECHO.test.:{}", echo.port()));
    assert_eq!(r.status, 200, "{r:?}");
    assert_echoes(&mut s);
}

#[test]
fn relay_keeps_bytes_the_client_sent_right_after_its_connect_head() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .start();
    let mut s = relay.connect();
    let target = echo.addr.to_string();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\nearly bytes").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut s).status, 200);
    let mut back = [0u8; 11];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"early bytes");
}

#[test]
fn relay_forwards_plain_http_get_in_origin_form_with_the_url_host() {
    let http = HttpServer::start("127.0.0.1:0", Body::Text("hello from origin".into()));
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", http.port()))
        .start();
    let (_s, r) = relay.send(
        format!(
            "GET http://127.0.0.1:{}/pool/main/x.deb?y=1 HTTP/1.1\r\nHost: elsewhere.example\r\n\
             Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\nUser-Agent: t\r\n\r\n",
            http.port()
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "hello from origin");
    let heads = http.heads();
    assert_eq!(heads.len(), 1);
    let head = &heads[0];
    assert!(
        head.starts_with("GET /pool/main/x.deb?y=1 HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\nHost: 127.0.0.1:{}\r\n", http.port())),
        "{head}"
    );
    assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
    assert!(head.contains("\r\nUser-Agent: t\r\n"), "{head}");
    assert!(!head.contains("elsewhere"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
}

#[test]
fn relay_forwards_head_requests() {
    let http = HttpServer::start("127.0.0.1:0", Body::Text("body not sent for HEAD".into()));
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", http.port()))
        .start();
    let mut s = relay.connect();
    s.write_all(format!("HEAD http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", http.port()).as_bytes())
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.ends_with("\r\n\r\n"),
        "no body after a HEAD answer: {answer}"
    );
    assert!(http.heads()[0].starts_with("HEAD / HTTP/1.1"));
}

#[test]
fn curl_fetches_plain_http_and_tunnels_through_the_relay() {
    let http = HttpServer::start("127.0.0.1:0", Body::Text("curl was here".into()));
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", http.port()))
        .start();
    let url = format!("http://127.0.0.1:{}/file", http.port());
    let proxy = format!("http://{}", relay.addr);
    for extra in [&[][..], &["--proxytunnel"][..]] {
        let out = Command::new("curl")
            .args(["-sS", "--noproxy", "", "-x", &proxy])
            .args(extra)
            .arg(&url)
            .output()
            .expect("curl is installed");
        assert!(
            out.status.success(),
            "curl {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "curl was here");
    }
    let heads = http.heads();
    assert_eq!(heads.len(), 2);
}

#[test]
fn curl_sees_a_403_with_the_reason_header_for_a_host_not_on_the_list() {
    let relay = Relay::builder().allow("pypi.org").start();
    let proxy = format!("http://{}", relay.addr);
    let out = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-D",
            "-",
            "--noproxy",
            "",
            "-x",
            &proxy,
        ])
        .arg("http://not-listed.example/")
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("X-Nestbox-Denied: host_not_allowed"),
        "{head}"
    );
}

#[test]
fn relay_answers_502_when_the_allowed_destination_refuses_the_connection() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let relay = Relay::builder().allow(&format!("127.0.0.1:{port}")).start();
    let (_s, r) = relay.connect_to(&format!("127.0.0.1:{port}"));
    let v = assert_refused(&r, 502, "connect_failed");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{port}")),
        "{v}"
    );
}

#[test]
fn relay_answers_504_when_the_destination_never_answers() {
    let hole = Blackhole::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", hole.addr.port()))
        .limits(|l| l.connect_timeout = std::time::Duration::from_millis(500))
        .start();
    let started = std::time::Instant::now();
    let (_s, r) = relay.connect_to(&hole.addr.to_string());
    assert_refused(&r, 504, "connect_timeout");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn relay_carries_a_large_transfer_intact_across_pauses_and_half_close() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .start();
    let (s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200);
    let data: Vec<u8> = (0..24 * 1024 * 1024u32)
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect();
    let mut writer = s.try_clone().unwrap();
    let sent = data.clone();
    let t = std::thread::spawn(move || {
        let (a, b) = sent.split_at(sent.len() / 2);
        writer.write_all(a).unwrap();
        // longer than the relay keeps an idle pipe: the second half needs a new one
        std::thread::sleep(std::time::Duration::from_millis(600));
        writer.write_all(b).unwrap();
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::with_capacity(data.len());
    let mut reader = s;
    reader.read_to_end(&mut back).unwrap(); // ends when the echo server closes after our EOF
    t.join().unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "bytes differ");
}
