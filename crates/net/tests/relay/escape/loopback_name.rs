//! A name on the list that resolves to loopback does not reach the host: the resolved address
//! is checked too, and dialed as checked.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_a_listed_name_that_resolves_to_loopback() {
    let echo = Echo::start();
    let p = echo.port();
    // `localhost` goes through the system resolver (/etc/hosts) here
    let relay = Relay::builder().allow(&format!("localhost:{p}")).start();
    let (_s, r) = relay.connect_to(&format!("localhost:{p}"));
    let v = assert_refused(&r, 403, "loopback_address");
    assert!(v["detail"].as_str().unwrap().contains("127.0.0.1"), "{v}");
    assert!(
        v["allow"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{p}")),
        "{v}"
    );
    assert_eq!(echo.connections(), 0);

    // control: naming the loopback address explicitly opens it
    let relay = Relay::builder()
        .allow(&format!("localhost:{p}"))
        .allow(&format!("127.0.0.1:{p}"))
        .start();
    let (mut s, r) = relay.connect_to(&format!("localhost:{p}"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_echoes(&mut s);
}

#[test]
fn relay_refuses_a_name_resolving_to_private_link_local_or_unspecified_addresses() {
    for (addr, reason) in [
        ("10.1.2.3", "private_address"),
        ("192.168.0.1", "private_address"),
        ("172.16.5.5", "private_address"),
        ("100.64.0.1", "private_address"),
        ("fd12::1", "private_address"),
        ("169.254.10.10", "link_local_address"),
        ("fe80::1", "link_local_address"),
        ("0.0.0.0", "unspecified_address"),
        ("::", "unspecified_address"),
        ("224.0.0.1", "multicast_address"),
        ("255.255.255.255", "broadcast_address"),
    ] {
        let relay = Relay::builder()
            .allow("inside.test")
            .resolve(&format!("inside.test={addr}"))
            .start();
        let (_s, r) = relay.connect_to("inside.test:443");
        assert_refused(&r, 403, reason);
    }
}

#[test]
fn relay_refuses_when_any_resolved_address_is_refused() {
    // rebinding trick: one harmless answer, one loopback answer
    let relay = Relay::builder()
        .allow("mixed.test")
        .resolve("mixed.test=203.0.113.9,127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to("mixed.test:443");
    assert_refused(&r, 403, "loopback_address");
}
