//! This machine's own non-loopback addresses (the address of eth0, say) reach its services as
//! loopback does; and IPv6 forms that embed an IPv4 address are judged by that address.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

/// A non-loopback IPv4 address of this machine.
fn interface_address() -> String {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("ip (iproute2) is needed: apt-get install -y iproute2");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .map(String::from)
        .expect("this machine has a global IPv4 address")
}

#[test]
fn relay_refuses_a_name_resolving_to_this_machines_own_address() {
    let here = interface_address();
    let echo = Echo::start_on(&format!("{here}:0"));
    let p = echo.port();
    let relay = Relay::builder()
        .allow(&format!("self.test:{p}"))
        .resolve(&format!("self.test={here}"))
        .start();
    let (_s, r) = relay.connect_to(&format!("self.test:{p}"));
    assert_refused(&r, 403, "this_host_address");
    assert_eq!(echo.connections(), 0);

    // control: naming the address opens it
    let relay = Relay::builder()
        .allow(&format!("self.test:{p}"))
        .allow(&format!("{here}:{p}"))
        .resolve(&format!("self.test={here}"))
        .start();
    let (mut s, r) = relay.connect_to(&format!("self.test:{p}"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_echoes(&mut s);
}

#[test]
fn relay_refuses_ipv6_forms_that_embed_a_refused_ipv4_address() {
    for (addr, reason) in [
        ("::7f00:1", "loopback_address"),
        ("2002:7f00:1::1", "loopback_address"),
        ("2002:a9fe:a9fe::1", "metadata_address"),
        ("64:ff9b:1::a00:1", "private_address"),
    ] {
        let relay = Relay::builder()
            .allow("embed.test")
            .resolve(&format!("embed.test={addr}"))
            .start();
        let (_s, r) = relay.connect_to("embed.test:443");
        assert_refused(&r, 403, reason);
    }
}
