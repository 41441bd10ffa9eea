//! What a request head asks for: a tunnel (`CONNECT host:port`) or a plain-HTTP fetch
//! (`GET http://host/path`), and the head the relay sends on for the latter.

use nestbox_policy::{Host, RequestKind, parse_authority};

use super::head::Head;
use super::refusal::Refusal;
use crate::upstream::Upstream;

/// A request the relay serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `CONNECT host:port`.
    Connect { host: Host, port: u16 },
    /// `GET|HEAD http://host[:port]/path`.
    Http {
        host: Host,
        port: u16,
        /// `/path?query`, never empty.
        path: String,
    },
}

impl Request {
    pub fn host(&self) -> &Host {
        match self {
            Request::Connect { host, .. } | Request::Http { host, .. } => host,
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Request::Connect { port, .. } | Request::Http { port, .. } => *port,
        }
    }

    pub fn kind(&self) -> RequestKind {
        match self {
            Request::Connect { .. } => RequestKind::Connect,
            Request::Http { .. } => RequestKind::PlainHttp,
        }
    }
}

/// Reads what `head` asks for; anything else is a refusal saying what is supported.
pub(crate) fn interpret(head: &Head) -> Result<Request, Refusal> {
    match head.method.as_str() {
        "CONNECT" => connect_target(&head.target),
        "GET" | "HEAD" => {
            let Some((scheme, _)) = head.target.split_once("://") else {
                return Err(Refusal::method_not_allowed(format!(
                    "`{} {}` is a request to a web server; this is a proxy: it serves \
                     absolute http:// URLs and CONNECT",
                    head.method,
                    truncate(&head.target)
                )));
            };
            if !scheme.eq_ignore_ascii_case("http") {
                return Err(Refusal::method_not_allowed(format!(
                    "`{scheme}://` URLs are not forwarded: HTTPS goes through CONNECT"
                )));
            }
            if head.header("content-length").is_some_and(|v| v != "0")
                || head.header("transfer-encoding").is_some()
            {
                return Err(Refusal::bad_request(format!(
                    "a {} request with a body is not forwarded",
                    head.method
                )));
            }
            http_target(&head.target)
        }
        other => Err(Refusal::method_not_allowed(format!(
            "method `{other}` is not supported"
        ))),
    }
}

fn truncate(text: &str) -> &str {
    match text.char_indices().nth(80) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn connect_target(target: &str) -> Result<Request, Refusal> {
    let (host, port) =
        parse_authority(target).map_err(|e| Refusal::bad_request(format!("CONNECT target {e}")))?;
    let port = port.ok_or_else(|| {
        Refusal::bad_request(format!(
            "CONNECT target `{}` needs a port (host:port)",
            truncate(target)
        ))
    })?;
    Ok(Request::Connect { host, port })
}

/// Splits `http://authority/path?query#fragment`. User info in the URL is refused: it would be
/// sent nowhere (clients send credentials in headers) and only serves to disguise the host.
fn http_target(url: &str) -> Result<Request, Refusal> {
    let rest = &url[url.find("://").map_or(0, |i| i + 3)..];
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    if authority.contains('@') {
        return Err(Refusal::bad_request(
            "user info (`user@`) in the URL is not accepted",
        ));
    }
    let (host, port) =
        parse_authority(authority).map_err(|e| Refusal::bad_request(format!("URL host {e}")))?;
    let tail = tail.split('#').next().unwrap_or("");
    let path = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok(Request::Http {
        host,
        port: port.unwrap_or(80),
        path,
    })
}

/// Hop-by-hop and proxy fields that never go further than the relay (nor the gateway).
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The `Host` value (and authority) for `host:port`: the port only when it is not 80.
pub(crate) fn authority(host: &Host, port: u16) -> String {
    if port == 80 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

/// The head the relay sends on for a plain-HTTP request. To the origin: origin-form
/// (`GET /path`). To an upstream proxy: absolute-form (`GET http://host/path`) with the
/// upstream's `Proxy-Authorization`. `Host` is set to the URL's authority, hop-by-hop fields
/// (and those named in `Connection`) are dropped, and `Connection: close` ends the exchange after
/// one response so the next request on the connection cannot reach a host nobody checked.
pub(crate) fn forward_head(
    head: &Head,
    host: &Host,
    port: u16,
    path: &str,
    upstream: Option<&Upstream>,
) -> Vec<u8> {
    let authority = authority(host, port);
    let named_in_connection: Vec<String> = head
        .headers
        .iter()
        .filter(|(n, _)| {
            n.eq_ignore_ascii_case("connection") || n.eq_ignore_ascii_case("proxy-connection")
        })
        .flat_map(|(_, v)| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    let mut out = String::with_capacity(256);
    let target = match upstream {
        Some(_) => format!("http://{authority}{path}"),
        None => path.to_string(),
    };
    out.push_str(&format!(
        "{} {target} HTTP/1.{}\r\n",
        head.method, head.minor
    ));
    out.push_str(&format!("Host: {authority}\r\n"));
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || named_in_connection.contains(&lower) {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(auth) = upstream.and_then(Upstream::authorization) {
        out.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::head::parse;
    use proptest::prelude::*;

    fn head(text: &str) -> Head {
        parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn connect_targets_need_host_and_port() {
        let r = interpret(&head("CONNECT Example.COM:443 HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(
            r,
            Request::Connect {
                host: Host::Name("example.com".into()),
                port: 443
            }
        );
        let r = interpret(&head("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(r.port(), 8443);
        for bad in ["example.com", "::1:443", "[::1]", "a b:1", "ex ample:1"] {
            let text = format!("CONNECT {bad} HTTP/1.1\r\n\r\n");
            if let Ok(h) = parse(text.as_bytes()) {
                assert_eq!(interpret(&h).unwrap_err().status, 400, "{bad}");
            }
        }
    }

    #[test]
    fn absolute_http_urls_become_fetches() {
        let r = interpret(&head(
            "GET http://deb.debian.org/debian/dists HTTP/1.1\r\n\r\n",
        ))
        .unwrap();
        assert_eq!(
            r,
            Request::Http {
                host: Host::Name("deb.debian.org".into()),
                port: 80,
                path: "/debian/dists".into()
            }
        );
        let r = interpret(&head(
            "HEAD HTTP://h.example:8080?x=1#frag HTTP/1.1\r\n\r\n",
        ))
        .unwrap();
        assert_eq!(
            r,
            Request::Http {
                host: Host::Name("h.example".into()),
                port: 8080,
                path: "/?x=1".into()
            }
        );
    }

    #[test]
    fn other_methods_and_forms_are_405_saying_what_works() {
        for text in [
            "POST http://a.example/ HTTP/1.1\r\n\r\n",
            "DELETE http://a.example/ HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET https://a.example/ HTTP/1.1\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\n\r\n",
            "PRI * HTTP/1.1\r\n\r\n",
        ] {
            let r = interpret(&head(text)).unwrap_err();
            assert_eq!(r.status, 405, "{text}");
            assert!(r.allow.contains("CONNECT host:port"), "{}", r.allow);
        }
    }

    #[test]
    fn bodies_and_user_info_are_refused() {
        let r = interpret(&head(
            "GET http://a.example/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
        ));
        assert_eq!(r.unwrap_err().status, 400);
        let r = interpret(&head(
            "GET http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ));
        assert_eq!(r.unwrap_err().status, 400);
        let r = interpret(&head("GET http://u:p@a.example/ HTTP/1.1\r\n\r\n"));
        assert_eq!(r.unwrap_err().status, 400);
        let r = interpret(&head(
            "GET http://a.example/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        ));
        assert!(r.is_ok());
    }

    #[test]
    fn forwarded_heads_drop_hop_by_hop_fields_and_set_host() {
        let h = head(
            "GET http://a.example/x HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: Basic zzz\r\n\
             Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nAccept: */*\r\n\r\n",
        );
        let host = Host::Name("a.example".into());
        let out = String::from_utf8(forward_head(&h, &host, 80, "/x", None)).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let up = Upstream::parse("http://u:p@proxy.example:3128").unwrap();
        let out = String::from_utf8(forward_head(&h, &host, 8080, "/x", Some(&up))).unwrap();
        assert!(
            out.starts_with("GET http://a.example:8080/x HTTP/1.1\r\nHost: a.example:8080\r\n")
        );
        assert!(out.contains("Proxy-Authorization: Basic dTpw\r\n"));
        assert!(!out.contains("zzz"));
    }

    proptest! {
        #[test]
        fn interpreting_any_target_never_panics(
            method in "CONNECT|GET|HEAD|POST",
            target in "[!-~]{1,60}",
            fields in proptest::collection::vec(("[A-Za-z-]{1,12}", "[ -~]{0,20}"), 0..5),
        ) {
            let head = Head { method, target, minor: 1, headers: fields };
            if let Ok(Request::Http { host, port, path }) = interpret(&head) {
                prop_assert!(path.starts_with('/'));
                let out = forward_head(&head, &host, port, &path, None);
                let text = String::from_utf8(out).unwrap();
                // exactly one blank line, at the end: nothing smuggled
                prop_assert_eq!(text.find("\r\n\r\n"), Some(text.len() - 4));
            }
        }
    }
}
