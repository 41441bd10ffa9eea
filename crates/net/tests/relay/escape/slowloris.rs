//! A client that trickles its head is cut off when the head timeout expires, however steadily
//! it sends: the limit is on the whole head, not on the gap between bytes.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::support::servers::Echo;
use crate::support::{Relay, assert_refused, read_response};

#[test]
fn relay_answers_408_to_a_slowloris_client_within_the_timeout() {
    let echo = Echo::start();
    let relay = Relay::builder()
        .allow(&format!("127.0.0.1:{}", echo.port()))
        .limits(|l| l.head_timeout = Duration::from_millis(800))
        .start();
    let mut s = relay.connect();
    s.set_nodelay(true).unwrap();
    let started = Instant::now();
    let head = format!("CONNECT {} HTTP/1.1\r\nX-Slow: ", echo.addr);
    let mut refused = None;
    for (i, b) in head.bytes().chain(std::iter::repeat(b'z')).enumerate() {
        if s.write_all(&[b]).is_err() || started.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        if i > 30 {
            // the relay has answered by now; stop trickling and read
            refused = Some(read_response(&mut s));
            break;
        }
    }
    let r = refused.expect("read the answer");
    assert_refused(&r, 408, "header_timeout");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(echo.connections(), 0);

    // control: the same head sent at once is served
    let (_s, r) = relay.send(format!("CONNECT {} HTTP/1.1\r\n\r\n", echo.addr).as_bytes());
    assert_eq!(r.status, 200);
}

#[test]
fn relay_answers_408_to_a_client_that_sends_nothing() {
    let relay = Relay::builder()
        .limits(|l| l.head_timeout = Duration::from_millis(300))
        .start();
    let mut s = relay.connect();
    s.write_all(b"CONN").unwrap();
    let r = read_response(&mut s);
    assert_refused(&r, 408, "header_timeout");
}
