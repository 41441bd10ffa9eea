//! The relay and the gateway in a chain: what the relay lets through still meets the gateway's
//! rules, and the gateway's refusal reaches the step with the gateway's reason.

use crate::common::{stderr, stdout};
use crate::support::*;

#[test]
fn a_host_the_relay_allows_but_the_gateway_does_not_is_refused_with_the_gateways_reason() {
    let api = ApiServer::start(&[API, "other.test"]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let allow = format!("other.test:{}", api.port);
    let url = format!("https://other.test:{}/", api.port);
    let out = gw.run(&["--allow", &allow], &["/usr/bin/curl", "-sS", "-v", &url]);
    assert!(
        stderr(&out).contains("X-Nestbox-Denied: no_matching_rule"),
        "{}",
        stderr(&out)
    );
    let refused = gw.audit_lines().into_iter().any(|l| {
        l["reason"] == "no_matching_rule"
            && l["actor"]["cell"] == "worker"
            && l["dst_endpoint"]["host"] == "other.test"
    });
    assert!(refused, "{:?}", gw.audit_lines());
    assert!(api.received().is_empty());
    // control: what the gateway grants the cell goes through
    let url = api_url(&api, "/v1/models");
    let out = gw.run(&[], &["/usr/bin/curl", "-sS", &url]);
    assert!(
        stdout(&out).contains("{\"ok\":true}"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_host_neither_allows_is_refused_by_the_relay_before_the_gateway_hears_of_it() {
    let api = ApiServer::start(&[API, "other.test"]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let url = format!("https://other.test:{}/", api.port);
    let out = gw.run(&[], &["/usr/bin/curl", "-sS", "-v", &url]);
    assert!(
        stderr(&out).contains("X-Nestbox-Denied: host_not_allowed"),
        "{}",
        stderr(&out)
    );
    let heard = gw
        .audit_lines()
        .iter()
        .any(|l| l["dst_endpoint"]["host"] == "other.test");
    assert!(!heard, "the gateway never saw it");
}
