//! Refusals: every way the relay says no, each with its own reason code, status, explanation and
//! a hint on how to allow it. The client gets the reason in `X-Nestbox-Denied` and a short JSON
//! body, so an agent can tell a policy denial from a network error (DESIGN principle 4).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use nestbox_policy::{AddrClass, Host, RequestKind, Rule};

use super::head::HeadLimits;
use crate::audit::Decision;
use crate::upstream::Upstream;

/// The methods and forms the relay serves, for 400 and 405 bodies.
const SUPPORTED: &str = "send `CONNECT host:port HTTP/1.1` (HTTPS and other TLS) or \
                         `GET|HEAD http://host[:port]/path HTTP/1.1` (plain HTTP) to this proxy";

/// A refusal, before it is rendered as a response.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub status: u16,
    /// Machine-readable reason: the `X-Nestbox-Denied` value and the body's `error`.
    pub reason: &'static str,
    pub detail: String,
    /// How to allow it (or what to send instead).
    pub allow: String,
    pub decision: Decision,
    /// The rule that decided, when one did (a deny rule).
    pub rule: Option<String>,
    /// A complete response to send instead of the rendered one: a gateway's own refusal,
    /// passed through so the client sees the gateway's reason.
    pub raw: Option<Vec<u8>>,
}

/// The allow entry that would let `host:port` through for `kind`.
fn entry(host: &Host, port: u16, kind: RequestKind) -> String {
    if port == kind.default_port() {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

fn target(host: &Host, port: u16) -> String {
    format!("{host}:{port}")
}

impl Refusal {
    pub(crate) fn new(status: u16, reason: &'static str, detail: String, allow: String) -> Refusal {
        Refusal {
            status,
            reason,
            detail,
            allow,
            decision: Decision::Deny,
            rule: None,
            raw: None,
        }
    }

    pub(crate) fn failed(mut self) -> Refusal {
        self.decision = Decision::Error;
        self
    }

    pub fn bad_request(detail: impl Into<String>) -> Refusal {
        Refusal::new(400, "bad_request", detail.into(), SUPPORTED.into())
    }

    pub fn request_line_too_long(limits: HeadLimits) -> Refusal {
        Refusal::new(
            414,
            "request_line_too_long",
            format!("the request line is longer than {} bytes", limits.max_line),
            SUPPORTED.into(),
        )
    }

    pub fn headers_too_large(limits: HeadLimits) -> Refusal {
        Refusal::new(
            431,
            "headers_too_large",
            format!("the request head is larger than {} bytes", limits.max_head),
            "send fewer or smaller header fields".into(),
        )
    }

    pub fn header_timeout(limit: Duration) -> Refusal {
        Refusal::new(
            408,
            "header_timeout",
            format!(
                "the request head did not arrive within {} ms",
                limit.as_millis()
            ),
            "send the whole request head at once".into(),
        )
    }

    pub fn method_not_allowed(detail: impl Into<String>) -> Refusal {
        Refusal::new(405, "method_not_allowed", detail.into(), SUPPORTED.into())
    }

    pub fn host_not_allowed(host: &Host, port: u16, kind: RequestKind) -> Refusal {
        let e = entry(host, port, kind);
        Refusal::new(
            403,
            "host_not_allowed",
            format!("{} is not on the step's allowlist", target(host, port)),
            format!("add `{e}` to the allowlist (--allow {e}, or net.allow in the policy)"),
        )
    }

    pub fn ip_literal_not_allowed(host: &Host, port: u16, kind: RequestKind) -> Refusal {
        let e = entry(host, port, kind);
        Refusal::new(
            403,
            "ip_literal_not_allowed",
            format!(
                "{} is an IP address, and no allow entry names that address or its range",
                target(host, port)
            ),
            format!("connect by host name, or allow the address: --allow {e}"),
        )
    }

    pub fn denied_by_rule(host: &Host, port: u16, rule: &Rule) -> Refusal {
        let mut r = Refusal::new(
            403,
            "denied_by_rule",
            format!("{} matches deny entry {rule}", target(host, port)),
            format!(
                "remove or narrow the deny entry `{}` ({})",
                rule.text, rule.source
            ),
        );
        r.rule = Some(rule.to_string());
        r
    }

    pub fn address_denied_by_rule(host: &Host, port: u16, addr: IpAddr, rule: &Rule) -> Refusal {
        let mut r = Refusal::new(
            403,
            "denied_by_rule",
            format!(
                "{} resolves to {addr}, which matches deny entry {rule}",
                target(host, port)
            ),
            format!(
                "remove or narrow the deny entry `{}` ({})",
                rule.text, rule.source
            ),
        );
        r.rule = Some(rule.to_string());
        r
    }

    pub fn address_refused(
        host: &Host,
        port: u16,
        addr: IpAddr,
        class: AddrClass,
        kind: RequestKind,
    ) -> Refusal {
        let a = Host::Addr(addr);
        let e = entry(&a, port, kind);
        let what = if host.addr().is_some() {
            format!("{} is {}", target(host, port), class.describe())
        } else {
            format!(
                "{} resolves to {addr}, {}",
                target(host, port),
                class.describe()
            )
        };
        let how = if class.needs_exact_entry() {
            format!("only an entry naming exactly this address opens it: --allow {e}")
        } else {
            format!("allow the address or its range explicitly: --allow {e}")
        };
        Refusal::new(
            403,
            class.reason(),
            format!("{what}; the relay refuses those unless the policy names them"),
            how,
        )
    }

    pub fn sni_mismatch(host: &Host, sni: &str) -> Refusal {
        Refusal::new(
            403,
            "sni_mismatch",
            format!("the TLS ClientHello names `{sni}`, but the tunnel was opened to {host}"),
            format!(
                "CONNECT to `{sni}` itself (and allow it) instead of tunnelling through {host}"
            ),
        )
    }

    pub fn tls_unreadable(host: &Host, why: &str) -> Refusal {
        Refusal::new(
            400,
            "tls_unreadable",
            format!("the TLS ClientHello sent into the tunnel to {host} is malformed: {why}"),
            "send a well-formed TLS ClientHello".into(),
        )
    }

    pub fn too_many_tunnels(max: usize) -> Refusal {
        Refusal::new(
            503,
            "too_many_tunnels",
            format!("the step already has {max} open tunnels, the most the relay allows"),
            "close idle connections, or raise the limit (--max-tunnels)".into(),
        )
    }

    pub fn dns_failed(host: &Host, why: &str) -> Refusal {
        Refusal::new(
            502,
            "dns_failed",
            format!("resolving {host} failed: {why}"),
            "check the host name".into(),
        )
        .failed()
    }

    pub fn connect_failed(host: &Host, port: u16, addrs: &[SocketAddr], why: &str) -> Refusal {
        let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        Refusal::new(
            502,
            "connect_failed",
            format!(
                "connecting to {} ({}) failed: {why}",
                target(host, port),
                list.join(", ")
            ),
            "the host is allowed; it did not accept the connection".into(),
        )
        .failed()
    }

    pub fn connect_timeout(host: &Host, port: u16, limit: Duration) -> Refusal {
        Refusal::new(
            504,
            "connect_timeout",
            format!(
                "connecting to {} took longer than {} ms",
                target(host, port),
                limit.as_millis()
            ),
            "the host is allowed; it did not answer in time".into(),
        )
        .failed()
    }

    pub fn upstream_unreachable(up: &Upstream, why: &str) -> Refusal {
        Refusal::new(
            502,
            "upstream_unreachable",
            format!("the upstream proxy {up} could not be reached: {why}"),
            "start the upstream proxy, or run the relay without it (--no-upstream)".into(),
        )
        .failed()
    }

    pub fn upstream_timeout(up: &Upstream, limit: Duration) -> Refusal {
        Refusal::new(
            504,
            "upstream_timeout",
            format!(
                "the upstream proxy {up} did not complete the request within {} ms",
                limit.as_millis()
            ),
            "check the upstream proxy".into(),
        )
        .failed()
    }

    pub fn upstream_refused(up: &Upstream, status_line: &str) -> Refusal {
        let status = status_line.split(' ').nth(1).unwrap_or("");
        let (code, reason, hint) = match status {
            "403" => (
                403,
                "upstream_denied",
                "the upstream proxy's own policy refused it; ask its owner".to_string(),
            ),
            // 407 is the standard answer; tinyproxy answers bad credentials with 401
            "401" | "407" => (
                502,
                "upstream_refused",
                "give the upstream's credentials in its URL (http://user:pass@host:port)".into(),
            ),
            _ => (502, "upstream_refused", "check the upstream proxy".into()),
        };
        let r = Refusal::new(
            code,
            reason,
            format!("the upstream proxy {up} answered `{status_line}`"),
            hint,
        );
        if code == 403 { r } else { r.failed() }
    }

    /// A refusal by an upstream nestbox gateway (its answer carried `X-Nestbox-Denied`): the
    /// client gets the gateway's response as it was, so it sees the gateway's reason.
    pub fn from_gateway(up: &Upstream, status: u16, reason: &str, response: Vec<u8>) -> Refusal {
        let mut r = Refusal::new(
            status,
            "upstream_denied",
            format!("the gateway {up} refused: {reason}"),
            "see the gateway's answer".into(),
        );
        r.raw = Some(response);
        r
    }

    /// The HTTP response: status line, `X-Nestbox-Denied`, JSON body, `Connection: close`.
    pub fn response(&self) -> Vec<u8> {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let body = serde_json::json!({
            "error": self.reason,
            "detail": self.detail,
            "allow": self.allow,
        })
        .to_string();
        let mut extra = String::new();
        if self.status == 405 {
            extra.push_str("Allow: CONNECT, GET, HEAD\r\n");
        }
        if self.status == 503 {
            extra.push_str("Retry-After: 1\r\n");
        }
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nX-Nestbox-Denied: {}\r\n\
             {extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
            self.status,
            status_text(self.status),
            self.reason,
            body.len() + 1,
        )
        .into_bytes()
    }
}

pub(crate) fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_carry_header_and_json_body() {
        let host = Host::parse("example.com").unwrap();
        let r = Refusal::host_not_allowed(&host, 8443, RequestKind::Connect);
        let text = String::from_utf8(r.response()).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
        assert!(text.contains("\r\nX-Nestbox-Denied: host_not_allowed\r\n"));
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len());
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"], "host_not_allowed");
        assert!(
            v["allow"]
                .as_str()
                .unwrap()
                .contains("--allow example.com:8443")
        );
    }

    #[test]
    fn default_ports_are_left_out_of_the_hint() {
        let host = Host::parse("example.com").unwrap();
        let r = Refusal::host_not_allowed(&host, 80, RequestKind::PlainHttp);
        assert!(r.allow.contains("--allow example.com,"), "{}", r.allow);
    }
}
