//! TLS: inspected hosts get leaves from the gateway's CA (HTTP/2 offered by ALPN), servers are
//! verified, passthrough tunnels carry the server's own TLS untouched.

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use crate::common::{nestbox_bin, output_within, stderr, stdout};
use crate::support::*;

#[test]
fn http2_is_offered_to_clients_of_inspected_endpoints() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let url = api_url(&api, "/v1/models");
    let out = gw.run(
        &[],
        &[
            "/usr/bin/curl",
            "-sS",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
            &url,
        ],
    );
    assert_eq!(stdout(&out), "2 200", "{}", stderr(&out));
    // control: a rule with http2 = false keeps HTTP/1.1
    drop(gw);
    let policy =
        worker_policy(&api, "").replace("tls = \"inspect\"", "tls = \"inspect\"\nhttp2 = false");
    let gw = Gateway::start(&policy);
    let out = gw.run(
        &[],
        &[
            "/usr/bin/curl",
            "-sS",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
            &url,
        ],
    );
    assert_eq!(stdout(&out), "1.1 200", "{}", stderr(&out));
}

#[test]
fn a_server_the_gateway_cannot_verify_is_refused_with_upstream_tls_failed() {
    let api = ApiServer::start(&[API]);
    let policy = worker_policy(&api, "").replace(
        &format!("upstream_ca = [\"{}\"]", api.ca.display()),
        "upstream_ca = []",
    );
    let gw = Gateway::start(&policy);
    let url = api_url(&api, "/v1/models");
    let out = gw.run(&[], &["/usr/bin/curl", "-sS", "-v", &url]);
    assert!(
        stderr(&out).contains("X-Nestbox-Denied: upstream_tls_failed"),
        "{}",
        stderr(&out)
    );
    assert!(api.received().is_empty());
}

#[test]
fn a_passthrough_tunnel_carries_the_servers_own_tls_and_resolves_nothing() {
    let api = ApiServer::start(&[API]);
    let policy = worker_policy(&api, "").replace("tls = \"inspect\"", "tls = \"passthrough\"");
    let gw = Gateway::start(&policy);
    let header = format!("x-api-key: {PLACEHOLDER}");
    let url = api_url(&api, "/v1/messages");
    let out = gw.run(
        &["--credential", "ANTHROPIC_API_KEY"],
        &[
            "/usr/bin/curl",
            "-sS",
            "-H",
            &header,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{certs}",
            "--no-progress-meter",
            &url,
        ],
    );
    assert!(
        stdout(&out).starts_with("200"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // the server's certificate chain is the test CA's, not the gateway's
    assert!(
        !stdout(&out).contains("nestbox gateway CA"),
        "{}",
        stdout(&out)
    );
    // a tunnel cannot be rewritten: the placeholder arrives as text, the secret never does
    assert_eq!(api.received()[0].header("x-api-key"), Some(PLACEHOLDER));
}

#[test]
fn the_gateway_ca_is_printed_and_its_key_is_readable_only_by_its_user() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = output_within(
        Command::new(nestbox_bin())
            .args(["gateway", "ca", "--dir"])
            .arg(&state),
        Duration::from_secs(10),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("-----BEGIN CERTIFICATE-----"),
        "{}",
        stdout(&out)
    );
    let key = std::fs::metadata(state.join("ca.key")).unwrap();
    assert_eq!(key.mode() & 0o777, 0o600);
    // the same CA the next time
    let again = output_within(
        Command::new(nestbox_bin())
            .args(["gateway", "ca", "--dir"])
            .arg(&state),
        Duration::from_secs(10),
    );
    assert_eq!(stdout(&again), stdout(&out));
}

#[test]
fn a_server_that_speaks_http2_gets_the_request_over_http2_with_the_key() {
    let api = ApiServer::start_h2(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let header = format!("x-api-key: {PLACEHOLDER}");
    let url = api_url(&api, "/v1/messages");
    // the step speaks HTTP/1.1 to the gateway; the gateway speaks HTTP/2 to the server
    let out = gw.run(
        &["--credential", "ANTHROPIC_API_KEY"],
        &[
            "/usr/bin/curl",
            "-sS",
            "--http1.1",
            "-H",
            &header,
            "-d",
            "{}",
            &url,
        ],
    );
    assert!(
        stdout(&out).contains("{\"ok\":true}"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let got = api.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].version, "HTTP/2");
    assert_eq!(got[0].header("x-api-key"), Some(SECRET));
    assert_eq!(got[0].path, "/v1/messages");
}
