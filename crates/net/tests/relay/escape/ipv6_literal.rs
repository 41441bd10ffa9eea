//! IPv6 literals: brackets are parsed, not split on the first colon; an unbracketed literal with
//! a port is refused as ambiguous.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_a_bracketed_ipv6_loopback_literal() {
    let relay = Relay::builder().allow("localhost").start();
    let (_s, r) = relay.connect_to("[::1]:443");
    assert_refused(&r, 403, "ip_literal_not_allowed");
}

#[test]
fn relay_refuses_unbracketed_and_zoned_ipv6_targets() {
    let relay = Relay::builder().allow("[::1]:*").start();
    for target in ["::1:443", "[::1]443", "[::1", "[fe80::1%lo]:443", "[::1]:"] {
        let (_s, r) = relay.connect_to(target);
        assert_refused(&r, 400, "bad_request");
    }
}

#[test]
fn relay_tunnels_to_an_allowed_bracketed_ipv6_literal() {
    // control: an echo server on [::1], allowed by a bracketed entry with port
    let echo = Echo::start_on("[::1]:0");
    let relay = Relay::builder()
        .allow(&format!("[::1]:{}", echo.port()))
        .start();
    let (mut s, r) = relay.connect_to(&format!("[::1]:{}", echo.port()));
    assert_eq!(r.status, 200, "{r:?}");
    assert_echoes(&mut s);
}
