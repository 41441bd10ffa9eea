//! Oversized headers are refused with 431 at the limit.

use std::io::Write;

use crate::support::servers::Echo;
use crate::support::{Relay, assert_refused, read_response};

#[test]
fn relay_refuses_oversized_headers() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .start();
    let mut s = relay.connect();
    let mut head = format!("CONNECT {} HTTP/1.1\r\n", echo.addr);
    for i in 0..1000 {
        head.push_str(&format!("X-Padding-{i}: {}\r\n", "p".repeat(40)));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let r = read_response(&mut s);
    assert_refused(&r, 431, "headers_too_large");
    assert_eq!(echo.connections(), 0);

    // control: a few headers are fine
    let (_s, r) = relay.send(
        format!(
            "CONNECT {} HTTP/1.1\r\nUser-Agent: t\r\nX-A: 1\r\n\r\n",
            echo.addr
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 200);
}
