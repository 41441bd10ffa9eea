//! An absurd request line is refused with 414 as soon as it passes the limit, without waiting
//! for its end.

use std::io::Write;

use crate::support::{Relay, assert_refused, read_response};

#[test]
fn relay_refuses_an_absurd_request_line() {
    let relay = Relay::builder().allow("*.example.com:*").start();
    let mut s = relay.connect();
    let long = format!("CONNECT {}.example.com:443", "a".repeat(9000));
    s.write_all(long.as_bytes()).unwrap(); // no line end yet
    let r = read_response(&mut s);
    assert_refused(&r, 414, "request_line_too_long");

    // control: a normal request line on the same relay is answered (here: not listed)
    let (_s, r) = relay.connect_to("a.example.org:443");
    assert_refused(&r, 403, "host_not_allowed");
}

#[test]
fn relay_refuses_a_megabyte_of_garbage_without_a_newline() {
    let relay = Relay::builder().start();
    let mut s = relay.connect();
    // the relay answers after 8 KiB; the rest of the write may fail once it closes
    let _ = s.write_all(&vec![b'x'; 64 * 1024]);
    let r = read_response(&mut s);
    assert_refused(&r, 414, "request_line_too_long");
}
