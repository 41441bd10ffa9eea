//! The gateway's refusals. They share the relay's shape (status, `X-Nestbox-Denied` reason,
//! JSON body with `error`, `detail` and `allow`), so an agent reads both the same way.

use std::net::IpAddr;

use bytes::Bytes;
use nestbox_policy::gateway::CredentialSpec;
use nestbox_policy::{AddrClass, Host};

use super::identity::CallerId;
use crate::relay::refusal::Refusal;

fn target(host: &Host, port: u16) -> String {
    format!("{host}:{port}")
}

/// How a policy names a caller, for hints.
fn caller_keys(caller: &CallerId) -> String {
    match caller {
        CallerId::Cell { name, .. } => format!("cell = \"{name}\""),
        CallerId::Program { exe, .. } => format!("program = \"{exe}\""),
        CallerId::Unknown { .. } => "any = true".to_string(),
    }
}

impl Refusal {
    /// No rule names this caller and destination.
    pub fn no_matching_rule(caller: &CallerId, host: &Host, port: u16) -> Refusal {
        let mut detail = format!("no gateway rule lets {caller} reach {}", target(host, port));
        if let CallerId::Unknown { why } = caller {
            detail.push_str(&format!(" (only `any` rules apply to it: {why})"));
        }
        Refusal::new(
            403,
            "no_matching_rule",
            detail,
            format!(
                "add a [[rule]] to the gateway policy with {} and hosts = [\"{host}\"]{}",
                caller_keys(caller),
                if port == 443 {
                    String::new()
                } else {
                    format!(", ports = [{port}]")
                }
            ),
        )
    }

    /// The `Proxy-Authorization` names no registered cell.
    pub fn cell_token_invalid() -> Refusal {
        Refusal::new(
            403,
            "cell_token_invalid",
            "the request carries a cell token the gateway did not issue, or whose step has ended"
                .into(),
            "cells are registered by `nestbox run --gateway`; their relays send the token".into(),
        )
    }

    /// Several processes with different executables hold the client socket.
    pub fn caller_ambiguous(owners: &[(i32, String)]) -> Refusal {
        let list: Vec<String> = owners
            .iter()
            .map(|(p, e)| format!("{e} (pid {p})"))
            .collect();
        Refusal::new(
            403,
            "caller_ambiguous",
            format!(
                "the client socket is shared by processes running different programs: {}",
                list.join(", ")
            ),
            "connect from one process, or start the work as a cell (nestbox run --gateway)".into(),
        )
    }

    /// An address of a refused class, not opened by a rule's `addresses`.
    pub fn gateway_address_refused(
        host: &Host,
        port: u16,
        addr: IpAddr,
        class: AddrClass,
    ) -> Refusal {
        Refusal::new(
            403,
            class.reason(),
            format!(
                "{} resolves to {addr}, {}, which the gateway does not dial unless a rule names it",
                target(host, port),
                class.describe()
            ),
            format!("add addresses = [\"{addr}\"] to the rule that allows {host}"),
        )
    }

    /// The request's path or method is not among the admitted rules'.
    pub fn request_not_allowed(method: &str, host: &Host, path: &str, rules: &[String]) -> Refusal {
        Refusal::new(
            403,
            "request_not_allowed",
            format!(
                "{method} {host}{path} is not among the paths and methods of rule(s) {}",
                rules.join(", ")
            ),
            "add the path (`paths`) or method (`methods`) to a rule for this host".into(),
        )
    }

    /// A placeholder names a credential the policy does not define.
    pub fn credential_unknown(name: &str) -> Refusal {
        Refusal::new(
            403,
            "credential_unknown",
            format!(
                "the request holds a placeholder for `{name}`, which the gateway policy does not define"
            ),
            format!("add a [[credential]] named `{name}` to the gateway policy"),
        )
    }

    /// A placeholder sent to an endpoint its credential is not bound to.
    pub fn credential_endpoint_mismatch(
        spec: &CredentialSpec,
        host: &Host,
        port: u16,
        path: &str,
    ) -> Refusal {
        let bound: Vec<String> = spec.endpoints.iter().map(|e| e.to_string()).collect();
        Refusal::new(
            403,
            "credential_endpoint_mismatch",
            format!(
                "credential `{}` is bound to {}, not to {}{path}",
                spec.name,
                bound.join(", "),
                target(host, port)
            ),
            format!("bind it there in its `endpoints` ({})", spec.origin),
        )
    }

    /// A placeholder sent by a caller its credential is not bound to.
    pub fn credential_caller_mismatch(spec: &CredentialSpec, caller: &CallerId) -> Refusal {
        let bound: Vec<String> = spec.callers.iter().map(|c| c.to_string()).collect();
        Refusal::new(
            403,
            "credential_caller_mismatch",
            format!(
                "credential `{}` is bound to {}, not to {caller}",
                spec.name,
                bound.join(", ")
            ),
            format!(
                "add {{ {} }} to its `callers` ({})",
                caller_keys(caller),
                spec.origin
            ),
        )
    }

    /// A cell used a credential its launcher did not ask for.
    pub fn credential_not_granted(name: &str, caller: &CallerId) -> Refusal {
        Refusal::new(
            403,
            "credential_not_granted",
            format!("{caller} was not started with credential `{name}`"),
            format!("start it with `nestbox run --gateway URL --credential {name}`"),
        )
    }

    /// A placeholder in a request body, which the gateway never rewrites.
    pub fn placeholder_in_body(name: &str) -> Refusal {
        Refusal::new(
            403,
            "placeholder_in_body",
            format!(
                "the request body holds the placeholder for `{name}`; placeholders are resolved \
                 in header values, path segments and query values only, so this one would reach \
                 the server as text. Nothing was sent"
            ),
            "send the credential in a header (e.g. Authorization or x-api-key)".into(),
        )
    }

    /// A body larger than the gateway inspects.
    pub fn body_too_large(limit: u64) -> Refusal {
        Refusal::new(
            413,
            "body_too_large_to_inspect",
            format!(
                "the request body is larger than {limit} bytes, the most the gateway buffers to \
                 check for placeholders before sending. Nothing was sent"
            ),
            "raise gateway.max_body in the gateway policy, or use tls = \"passthrough\" for this host".into(),
        )
    }

    /// The request names another host than the `CONNECT` did.
    pub fn host_mismatch(connect: &Host, port: u16, asked: &str) -> Refusal {
        Refusal::new(
            421,
            "host_mismatch",
            format!(
                "the tunnel was opened to {}, but the request is for `{asked}`",
                target(connect, port)
            ),
            "open a tunnel (CONNECT) to each host you send requests to".into(),
        )
    }

    /// A path with `.` or `..` segments (which servers would resolve after the check).
    pub fn path_not_canonical(path: &str) -> Refusal {
        Refusal::new(
            400,
            "path_not_canonical",
            format!("the path `{path}` has `.` or `..` segments"),
            "send the path without dot segments".into(),
        )
    }

    /// A resolved value that cannot go into a request.
    pub fn credential_value_invalid(name: &str) -> Refusal {
        Refusal::new(
            500,
            "credential_value_invalid",
            format!("the secret of `{name}` cannot be placed in a request (CR, LF or NUL)"),
            "fix the secret's source".into(),
        )
        .failed()
    }

    /// Plain-HTTP forwarding, which the gateway does not do.
    pub fn plain_http_not_supported() -> Refusal {
        Refusal::new(
            405,
            "plain_http_not_supported",
            "the gateway serves CONNECT tunnels only (HTTPS and other TLS)".into(),
            "use https://, or reach plain-HTTP hosts through a relay without the gateway".into(),
        )
    }

    /// The server's TLS could not be verified or completed.
    pub fn upstream_tls_failed(host: &Host, port: u16, why: &str) -> Refusal {
        Refusal::new(
            502,
            "upstream_tls_failed",
            format!("TLS with {} failed: {why}", target(host, port)),
            "the server's certificate must verify against the system roots or gateway.upstream_ca"
                .into(),
        )
        .failed()
    }

    /// Sending the request to the server failed.
    pub fn upstream_failed(host: &Host, port: u16, why: &str) -> Refusal {
        Refusal::new(
            502,
            "upstream_failed",
            format!("the request to {} failed: {why}", target(host, port)),
            "the request was allowed; the server did not complete it".into(),
        )
        .failed()
    }

    /// As an HTTP response inside an inspected connection.
    pub fn http_response(&self) -> hyper::Response<Bytes> {
        let body = serde_json::json!({
            "error": self.reason,
            "detail": self.detail,
            "allow": self.allow,
        })
        .to_string()
            + "\n";
        let mut r = hyper::Response::new(Bytes::from(body));
        *r.status_mut() =
            hyper::StatusCode::from_u16(self.status).unwrap_or(hyper::StatusCode::FORBIDDEN);
        let h = r.headers_mut();
        h.insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        h.insert(
            "x-nestbox-denied",
            hyper::header::HeaderValue::from_static(self.reason),
        );
        r
    }
}
