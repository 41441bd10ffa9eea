//! Checks across rules: endpoint ambiguity, and credentials that could never be resolved.
//!
//! **Endpoint ambiguity.** The TLS handling of a connection (tunnel or terminate, and whether
//! HTTP/2 is offered) is decided when the `CONNECT` arrives, before any path is seen. Two rules
//! that one caller could match for one `host:port` must agree on it, or the answer would depend
//! on rule order. Unlike OpenShell, the check is scoped per caller: a cell and a program, or two
//! programs whose executables differ, may treat the same host differently.

use std::fmt::Write as _;

use super::load::err_at;
use super::model::{Caller, GatewayPolicy, GatewayRule, HostEntry, TlsMode};
use crate::host::HostPattern;
use crate::load::PolicyError;

/// Whether some host matches both patterns.
pub fn patterns_overlap(a: &HostPattern, b: &HostPattern) -> bool {
    use HostPattern::*;
    match (a, b) {
        (Exact(x), Exact(y)) => x == y,
        (Exact(x), p @ Subdomains(_)) | (p @ Subdomains(_), Exact(x)) => p.matches_name(x),
        (Subdomains(x), Subdomains(y)) => x == y || a.matches_name(y) || b.matches_name(x),
        (Addr(x), other) | (other, Addr(x)) => other.matches_addr(*x),
        (Range(x), Range(y)) => x.contains(y.network()) || y.contains(x.network()),
        _ => false,
    }
}

/// A host and port both rules match, for the message.
fn shared_endpoint<'a>(
    a: &'a GatewayRule,
    b: &'a GatewayRule,
) -> Option<(String, u16, &'a HostEntry, &'a HostEntry)> {
    let port = a.ports.iter().find(|p| b.ports.contains(p))?;
    for ha in &a.hosts {
        for hb in &b.hosts {
            if patterns_overlap(&ha.pattern, &hb.pattern) {
                return Some((narrower(ha, hb), *port, ha, hb));
            }
        }
    }
    None
}

/// The more specific of two overlapping entries, as text.
fn narrower(a: &HostEntry, b: &HostEntry) -> String {
    match (&a.pattern, &b.pattern) {
        (HostPattern::Exact(_) | HostPattern::Addr(_), _) => a.text.clone(),
        (_, HostPattern::Exact(_) | HostPattern::Addr(_)) => b.text.clone(),
        _ if a.text.len() >= b.text.len() => a.text.clone(),
        _ => b.text.clone(),
    }
}

/// ` (rule `b` has it from preset github)`, for entries that came from presets.
fn describe_sources(a: (&str, &HostEntry), b: (&str, &HostEntry)) -> String {
    let mut out = String::new();
    for (rule, e) in [a, b] {
        if let Some(p) = &e.preset {
            let _ = write!(out, " (rule `{rule}` has `{}` from preset {p})", e.text);
        }
    }
    out
}

/// Validates `policy` in place: an error for the first ambiguity, warnings for the rest.
pub(crate) fn validate(policy: &mut GatewayPolicy) -> Result<(), PolicyError> {
    let rules = &policy.rules;
    for (j, b) in rules.iter().enumerate() {
        for a in &rules[..j] {
            if !a.caller.overlaps(&b.caller) {
                continue;
            }
            let Some((host, port, ea, eb)) = shared_endpoint(a, b) else {
                continue;
            };
            let (field, va, vb, at) = if a.tls != b.tls {
                ("tls", a.tls.as_str(), b.tls.as_str(), &b.tls_origin)
            } else if a.tls == TlsMode::Inspect && a.http2 != b.http2 {
                let s = |v: bool| if v { "true" } else { "false" };
                ("http2", s(a.http2), s(b.http2), &b.http2_origin)
            } else {
                continue;
            };
            let entry = describe_sources((&a.name, ea), (&b.name, eb));
            let mut m = String::new();
            let _ = write!(
                m,
                "endpoint ambiguity: rule `{}` ({}) and rule `{}` ({}) both match {host}:{port}{entry} \
                 for one caller ({}; {}), but rule `{}` says {field} = \"{va}\" ({}) and rule `{}` \
                 says {field} = \"{vb}\" (here). The {field} handling of a connection is decided \
                 before any request is seen, so one caller gets one answer per endpoint: give both \
                 rules the same `{field}`, make their hosts or ports disjoint, or narrow their \
                 callers so that no caller matches both",
                a.name,
                a.origin,
                b.name,
                b.origin,
                a.caller,
                b.caller,
                a.name,
                if field == "tls" {
                    &a.tls_origin
                } else {
                    &a.http2_origin
                },
                b.name,
            );
            return Err(err_at(at, m));
        }
    }
    let mut warnings = Vec::new();
    for c in &policy.credentials {
        for e in &c.endpoints {
            let inspected = policy.rules.iter().any(|r| {
                r.tls == TlsMode::Inspect
                    && r.ports.contains(&e.port)
                    && r.hosts
                        .iter()
                        .any(|h| patterns_overlap(&h.pattern, &e.host))
            });
            if !inspected {
                warnings.push(format!(
                    "{}: credential `{}` is bound to {e}, but no rule with tls = \"inspect\" \
                     covers that endpoint: its placeholder can never be resolved there",
                    c.origin, c.name
                ));
            }
        }
        for caller in &c.callers {
            let reachable = policy
                .rules
                .iter()
                .any(|r| caller_reaches(caller, &r.caller));
            if !reachable {
                warnings.push(format!(
                    "{}: credential `{}` is bound to {caller}, but no rule lets that caller \
                     through the gateway",
                    c.origin, c.name
                ));
            }
        }
    }
    policy.warnings = warnings;
    Ok(())
}

fn caller_reaches(credential: &Caller, rule: &Caller) -> bool {
    credential.overlaps(rule)
}

#[cfg(test)]
mod tests {
    use crate::gateway::parse_gateway_policy;

    fn rule(name: &str, who: &str, hosts: &str, extra: &str) -> String {
        format!("[[rule]]\nname = \"{name}\"\n{who}\nhosts = [{hosts}]\n{extra}\n")
    }

    #[test]
    fn one_caller_with_two_tls_handlings_for_one_endpoint_is_an_ambiguity() {
        let text = rule(
            "a",
            "cell = \"worker\"",
            "\"api.example.com\"",
            "tls = \"inspect\"",
        ) + &rule(
            "b",
            "any = true",
            "\"*.example.com\"",
            "tls = \"passthrough\"",
        );
        let e = parse_gateway_policy("gw.toml", &text).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("endpoint ambiguity"), "{m}");
        assert!(
            m.contains("rule `a` (gw.toml:2:8)") && m.contains("rule `b` (gw.toml:7:8)"),
            "{m}"
        );
        assert!(m.contains("api.example.com:443"), "{m}");
        assert!(m.contains("tls = \"inspect\" (gw.toml:5:7)"), "{m}");
        // the error points at the second rule's `tls`
        assert_eq!((e.line, e.column), (10, 7), "{m}");
    }

    #[test]
    fn different_callers_may_treat_one_endpoint_differently() {
        let text = rule(
            "a",
            "cell = \"worker\"",
            "\"api.example.com\"",
            "tls = \"inspect\"",
        ) + &rule("b", "program = \"/usr/bin/git\"", "\"api.example.com\"", "")
            + &rule(
                "c",
                "program = \"/usr/bin/curl\"",
                "\"api.example.com\"",
                "tls = \"inspect\"",
            );
        parse_gateway_policy("gw.toml", &text).unwrap();
    }

    #[test]
    fn a_rule_for_descendants_overlaps_every_program() {
        let text = rule(
            "a",
            "program = \"/opt/agent\"\ndescendants = true",
            "\"api.example.com\"",
            "",
        ) + &rule(
            "b",
            "program = \"/usr/bin/curl\"",
            "\"api.example.com\"",
            "tls = \"inspect\"",
        );
        let m = parse_gateway_policy("gw.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(m.contains("and its descendants"), "{m}");
    }

    #[test]
    fn disjoint_ports_or_hosts_are_no_ambiguity() {
        let text = rule(
            "a",
            "any = true",
            "\"api.example.com\"",
            "tls = \"inspect\"",
        ) + &rule("b", "any = true", "\"api.example.com\"", "ports = [8443]")
            + &rule("c", "any = true", "\"*.other.example\"", "");
        parse_gateway_policy("gw.toml", &text).unwrap();
    }

    #[test]
    fn http2_must_agree_too() {
        let text = rule(
            "a",
            "any = true",
            "\"api.example.com\"",
            "tls = \"inspect\"",
        ) + &rule(
            "b",
            "any = true",
            "\"api.example.com\"",
            "tls = \"inspect\"\nhttp2 = false",
        );
        let m = parse_gateway_policy("gw.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(m.contains("http2 = \"true\""), "{m}");
    }

    #[test]
    fn presets_take_part_and_are_named() {
        let text = rule("a", "any = true", "\"api.github.com\"", "tls = \"inspect\"")
            + "[[rule]]\nname = \"b\"\nany = true\npresets = [\"github\"]\n";
        let m = parse_gateway_policy("gw.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("api.github.com:443 (rule `b` has `api.github.com` from preset github)"),
            "{m}"
        );
    }

    #[test]
    fn credentials_nobody_can_use_are_warned_about() {
        let text = rule("a", "any = true", "\"api.example.com\"", "")
            + "[[credential]]\nname = \"K\"\nenv = \"K\"\nendpoints = [{ host = \"api.example.com\" }]\ncallers = [{ cell = \"w\" }]\n";
        let p = parse_gateway_policy("gw.toml", &text).unwrap();
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(p.warnings[0].contains("no rule with tls = \"inspect\""));
    }
}
