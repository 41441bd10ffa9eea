//! Chaining through a real upstream proxy (tinyproxy): tunnels and plain HTTP go through it,
//! with credentials; the allowlist is still the relay's; a dead upstream is a clear 502.

use crate::support::servers::Echo;
use crate::support::tinyproxy::Tinyproxy;
use crate::support::{Relay, assert_echoes, assert_refused};
use nestbox_testkit::http::{Body, HttpServer};

#[test]
fn relay_chains_connect_through_tinyproxy() {
    let echo = Echo::start();
    let proxy = Tinyproxy::start(None);
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .upstream(&proxy.url())
        .start();
    let (mut s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200, "{r:?}\ntinyproxy log:\n{}", proxy.log_text());
    assert_echoes(&mut s);
    let log = proxy.log_text();
    assert!(
        log.contains(&format!("CONNECT {}", echo.addr)),
        "the tunnel went through tinyproxy; log:\n{log}"
    );
}

#[test]
fn relay_chains_plain_http_through_tinyproxy() {
    let http = HttpServer::start("127.0.0.1:0", Body::Text("via upstream".into()));
    let proxy = Tinyproxy::start(None);
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", http.port()))
        .upstream(&proxy.url())
        .start();
    let (_s, r) =
        relay.send(format!("GET http://127.0.0.1:{}/p HTTP/1.1\r\n\r\n", http.port()).as_bytes());
    assert_eq!(r.status, 200, "{r:?}\ntinyproxy log:\n{}", proxy.log_text());
    assert_eq!(r.body, "via upstream");
    let log = proxy.log_text();
    assert!(
        log.contains(&format!("GET http://127.0.0.1:{}/p", http.port())),
        "the request went through tinyproxy; log:\n{log}"
    );
}

#[test]
fn relay_sends_the_upstream_credentials() {
    let echo = Echo::start();
    let proxy = Tinyproxy::start(Some(("nest", "s3cret")));
    let allow = format!("127.0.0.1:{}", echo.port());
    let url = format!("http://nest:s3cret@127.0.0.1:{}", proxy.port);
    let relay = Relay::builder().allow(&allow).upstream(&url).start();
    let (mut s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200, "{r:?}\ntinyproxy log:\n{}", proxy.log_text());
    assert_echoes(&mut s);

    // control: wrong credentials are refused by the upstream, and said so
    let wrong = format!("http://nest:wrong@127.0.0.1:{}", proxy.port);
    let relay = Relay::builder().allow(&allow).upstream(&wrong).start();
    let (_s, r) = relay.connect_to(&echo.addr.to_string());
    let v = assert_refused(&r, 502, "upstream_refused");
    let detail = v["detail"].as_str().unwrap();
    // tinyproxy says 401 to wrong credentials (407 is the standard answer to none)
    assert!(detail.contains("401") || detail.contains("407"), "{detail}");
    assert!(
        !r.body.contains("wrong"),
        "the password is never shown: {}",
        r.body
    );
}

#[test]
fn relay_answers_502_naming_the_upstream_when_it_is_down() {
    let echo = Echo::start();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .upstream(&format!("http://user:pw@127.0.0.1:{port}"))
        .start();
    let (_s, r) = relay.connect_to(&echo.addr.to_string());
    let v = assert_refused(&r, 502, "upstream_unreachable");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("127.0.0.1:{port}")), "{detail}");
    assert!(!detail.contains("pw"), "{detail}");
    let (_s, r) =
        relay.send(format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", echo.port()).as_bytes());
    assert_refused(&r, 502, "upstream_unreachable");
}

#[test]
fn relay_enforces_its_allowlist_before_the_upstream() {
    let proxy = Tinyproxy::start(None);
    let relay = Relay::builder()
        .allow("pypi.org")
        .upstream(&proxy.url())
        .start();
    let (_s, r) = relay.connect_to("not-listed.example:443");
    assert_refused(&r, 403, "host_not_allowed");
    let (_s, r) = relay.connect_to("127.0.0.1:22");
    assert_refused(&r, 403, "ip_literal_not_allowed");
    let log = proxy.log_text();
    assert!(
        !log.contains("Request ("),
        "nothing reached the upstream; log:\n{log}"
    );
}

#[test]
fn relay_refuses_a_name_resolving_to_loopback_even_with_an_upstream() {
    let proxy = Tinyproxy::start(None);
    let relay = Relay::builder()
        .allow("sneaky.test")
        .resolve("sneaky.test=127.0.0.1")
        .upstream(&proxy.url())
        .start();
    let (_s, r) = relay.connect_to("sneaky.test:443");
    assert_refused(&r, 403, "loopback_address");
}
