//! A deny entry wins over any allow entry, by name and by resolved address.

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_a_host_that_a_deny_entry_names_even_when_allowed() {
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder()
        .allow(&format!("*.svc.test:{p}"))
        .allow(&format!("127.0.0.1:{p}"))
        .deny("secret.svc.test")
        .resolve("secret.svc.test=127.0.0.1")
        .resolve("public.svc.test=127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to(&format!("secret.svc.test:{p}"));
    let v = assert_refused(&r, 403, "denied_by_rule");
    assert!(
        v["detail"].as_str().unwrap().contains("secret.svc.test"),
        "{v}"
    );
    assert!(v["allow"].as_str().unwrap().contains("--deny"), "{v}");

    // control: a sibling the deny entry does not name
    let (mut s, r) = relay.connect_to(&format!("public.svc.test:{p}"));
    assert_eq!(r.status, 200);
    assert_echoes(&mut s);
}

#[test]
fn relay_refuses_a_name_resolving_into_a_denied_range() {
    let echo = Echo::start();
    let p = echo.port();
    let relay = Relay::builder()
        .allow(&format!("a.test:{p}"))
        .allow(&format!("127.0.0.0/8:{p}"))
        .deny("127.0.0.0/24")
        .resolve("a.test=127.0.0.1")
        .start();
    let (_s, r) = relay.connect_to(&format!("a.test:{p}"));
    assert_refused(&r, 403, "denied_by_rule");
    assert_eq!(echo.connections(), 0);

    // control: the same relay without the deny entry
    let relay = Relay::builder()
        .allow(&format!("a.test:{p}"))
        .allow(&format!("127.0.0.0/8:{p}"))
        .resolve("a.test=127.0.0.1")
        .start();
    let (mut s, r) = relay.connect_to(&format!("a.test:{p}"));
    assert_eq!(r.status, 200);
    assert_echoes(&mut s);
}
