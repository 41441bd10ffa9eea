//! Only CONNECT and absolute-form GET/HEAD are served; everything else is a 405 that says what
//! works.

use crate::support::{Relay, assert_refused};
use nestbox_testkit::http::{Body, HttpServer};

#[test]
fn relay_refuses_other_methods_and_forms_with_405() {
    let http = HttpServer::start("127.0.0.1:0", Body::Text("x".into()));
    let p = http.port();
    let relay = Relay::builder().allow(&format!("127.0.0.1:{p}")).start();
    for req in [
        format!("POST http://127.0.0.1:{p}/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        format!("PUT http://127.0.0.1:{p}/x HTTP/1.1\r\n\r\n"),
        format!("DELETE http://127.0.0.1:{p}/x HTTP/1.1\r\n\r\n"),
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_string(),
        format!("GET https://127.0.0.1:{p}/ HTTP/1.1\r\n\r\n"),
        "OPTIONS * HTTP/1.1\r\n\r\n".to_string(),
        "PRI * HTTP/1.1\r\n\r\n".to_string(),
    ] {
        let (_s, r) = relay.send(req.as_bytes());
        let v = assert_refused(&r, 405, "method_not_allowed");
        assert!(
            v["allow"].as_str().unwrap().contains("CONNECT host:port"),
            "{v}"
        );
        assert_eq!(r.header("allow"), Some("CONNECT, GET, HEAD"));
    }
    assert!(http.heads().is_empty(), "nothing reached the server");

    // control: GET in absolute form is forwarded
    let (_s, r) = relay.send(format!("GET http://127.0.0.1:{p}/ HTTP/1.1\r\n\r\n").as_bytes());
    assert_eq!(r.status, 200);
}

#[test]
fn relay_refuses_get_with_a_body() {
    let relay = Relay::builder().allow("127.0.0.1:*").start();
    let (_s, r) = relay
        .send(b"GET http://127.0.0.1:9/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_refused(&r, 400, "bad_request");
}
