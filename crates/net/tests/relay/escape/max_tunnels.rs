//! A step cannot open more tunnels than the limit; closing one frees its slot.

use std::time::Duration;

use crate::support::servers::Echo;
use crate::support::{Relay, assert_echoes, assert_refused};

#[test]
fn relay_refuses_tunnels_beyond_the_limit_with_503() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .limits(|l| l.max_tunnels = 2)
        .start();
    let target = echo.addr.to_string();
    let (mut a, r) = relay.connect_to(&target);
    assert_eq!(r.status, 200);
    let (mut b, r) = relay.connect_to(&target);
    assert_eq!(r.status, 200);
    assert_echoes(&mut a);
    assert_echoes(&mut b);

    let (_c, r) = relay.connect_to(&target);
    assert_refused(&r, 503, "too_many_tunnels");
    assert_eq!(r.header("retry-after"), Some("1"));

    // control: close one, and a new tunnel fits again
    drop(a);
    let mut ok = None;
    for _ in 0..50 {
        let (s, r) = relay.connect_to(&target);
        if r.status == 200 {
            ok = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_echoes(&mut ok.expect("a slot was freed"));
}
