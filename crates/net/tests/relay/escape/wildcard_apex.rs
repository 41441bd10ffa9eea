//! `*.suffix` matches names below the suffix, never the suffix itself or look-alikes.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_the_apex_of_a_wildcard_entry() {
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder()
        .allow(&format!("*.svc.test:{p}"))
        .allow(&format!("127.0.0.1:{p}"))
        .resolve("svc.test=127.0.0.1")
        .resolve("api.svc.test=127.0.0.1")
        .resolve("evilsvc.test=127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to(&format!("svc.test:{p}"));
    assert_refused(&r, 403, "host_not_allowed");
    let (_s, r) = relay.connect_to(&format!("evilsvc.test:{p}"));
    assert_refused(&r, 403, "host_not_allowed");

    // control: a name below the suffix
    let (mut s, r) = relay.connect_to(&format!("api.svc.test:{p}"));
    assert_eq!(r.status, 200);
    assert_echoes(&mut s);
}
