//! CONNECT to an IP address needs an entry naming that address or its range: a name on the list
//! does not open the addresses it happens to resolve to.

use std::net::TcpStream;

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_connect_to_an_ip_literal_not_on_the_list() {
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder()
        .allow(&format!("echo.test:{p}"))
        .resolve("echo.test=127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to(&format!("127.0.0.1:{p}"));
    let v = assert_refused(&r, 403, "ip_literal_not_allowed");
    assert!(
        v["allow"]
            .as_str()
            .unwrap()
            .contains(&format!("--allow 127.0.0.1:{p}")),
        "{v}"
    );
    // a public-looking address too: refused before any packet leaves
    let (_s, r) = relay.connect_to("203.0.113.5:443");
    assert_refused(&r, 403, "ip_literal_not_allowed");
    assert_eq!(echo.connections(), 0);

    // control: the same probe without the relay reaches the server
    let mut direct = TcpStream::connect(echo.addr).unwrap();
    assert_echoes(&mut direct);
}

#[test]
fn relay_tunnels_to_an_ip_literal_inside_an_allowed_range() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.0/8:{}", echo.port()))
        .start();
    let (mut s, r) = relay.connect_to(&echo.addr.to_string());
    assert_eq!(r.status, 200);
    assert_echoes(&mut s);
}

#[test]
fn relay_refuses_numeric_host_forms_that_resolvers_read_as_ipv4() {
    let relay = Relay::builder().allow("*.example.com").start();
    for target in [
        "2130706433:443",
        "0x7f000001:443",
        "127.1:443",
        "0177.0.0.1:443",
    ] {
        let (_s, r) = relay.connect_to(target);
        assert_refused(&r, 400, "bad_request");
    }
}
