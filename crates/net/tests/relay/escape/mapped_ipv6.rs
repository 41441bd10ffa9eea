//! IPv4-mapped IPv6 (`::ffff:127.0.0.1`) is the IPv4 address it wraps: unwrapped before every
//! check, so it is neither a way around the loopback rule nor around an address entry.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_connect_to_an_ipv4_mapped_loopback_literal() {
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder().allow(&format!("echo.test:{p}")).start();
    let (_s, r) = relay.connect_to(&format!("[::ffff:127.0.0.1]:{p}"));
    assert_refused(&r, 403, "ip_literal_not_allowed");
    assert_eq!(echo.connections(), 0);
}

#[test]
fn relay_refuses_a_name_resolving_to_an_ipv4_mapped_loopback_address() {
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder()
        .allow(&format!("mapped.test:{p}"))
        .resolve("mapped.test=::ffff:127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to(&format!("mapped.test:{p}"));
    assert_refused(&r, 403, "loopback_address");
    assert_eq!(echo.connections(), 0);
}

#[test]
fn an_entry_for_the_ipv4_address_covers_its_mapped_form() {
    // control: allowed explicitly, the mapped literal reaches the IPv4 server
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder().allow(&format!("127.0.0.1:{p}")).start();
    let (mut s, r) = relay.connect_to(&format!("[::ffff:127.0.0.1]:{p}"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_echoes(&mut s);
}
