//! A host that is not on the list is refused before anything is resolved or dialed.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};
use nestbox_testkit::http::{Body, HttpServer};

#[test]
fn relay_refuses_connect_to_a_host_not_on_the_list() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("echo.test:{}", echo.port()))
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .resolve("echo.test=127.0.0.1")
        .resolve("other.test=127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to(&format!("other.test:{}", echo.port()));
    let v = assert_refused(&r, 403, "host_not_allowed");
    assert!(
        v["allow"]
            .as_str()
            .unwrap()
            .contains(&format!("--allow other.test:{}", echo.port())),
        "{v}"
    );
    assert_eq!(echo.connections(), 0, "nothing was dialed");

    // control: the listed name on the same address goes through
    let (mut s, r) = relay.connect_to(&format!("echo.test:{}", echo.port()));
    assert_eq!(r.status, 200);
    assert_echoes(&mut s);
}

#[test]
fn relay_refuses_a_listed_host_on_another_port() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow("echo.test")
        .allow("127.0.0.1:*")
        .resolve("echo.test=127.0.0.1")
        .start();
    // `echo.test` without a port means 443 for CONNECT
    let (_s, r) = relay.connect_to(&format!("echo.test:{}", echo.port()));
    assert_refused(&r, 403, "host_not_allowed");

    // control: the entry with this port
    let relay = Relay::builder()
        .allow(&format!("echo.test:{}", echo.port()))
        .allow("127.0.0.1:*")
        .resolve("echo.test=127.0.0.1")
        .start();
    let (mut s, r) = relay.connect_to(&format!("echo.test:{}", echo.port()));
    assert_eq!(r.status, 200);
    assert_echoes(&mut s);
}

#[test]
fn relay_refuses_plain_http_to_a_host_not_on_the_list() {
    let http = HttpServer::start("127.0.0.1:0", Body::Text("x".into()));
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", http.port()))
        .resolve("web.test=127.0.0.1")
        .start();
    let (_s, r) =
        relay.send(format!("GET http://web.test:{}/ HTTP/1.1\r\n\r\n", http.port()).as_bytes());
    assert_refused(&r, 403, "host_not_allowed");
    assert!(http.heads().is_empty());

    // control: by the allowed address
    let (_s, r) =
        relay.send(format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", http.port()).as_bytes());
    assert_eq!(r.status, 200);
}

#[test]
fn relay_with_an_empty_list_refuses_everything() {
    let relay = Relay::builder().start();
    let (_s, r) = relay.connect_to("pypi.org:443");
    assert_refused(&r, 403, "host_not_allowed");
}
