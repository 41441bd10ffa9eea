//! Credentials: a step holds a placeholder, the gateway puts the secret in only where the
//! credential is bound (endpoint and caller), and refuses everything else for a stated reason.

use crate::common::{stderr, stdout};
use crate::support::*;

#[test]
fn caged_curl_gets_its_key_injected_while_the_step_sees_only_the_placeholder() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let url = api_url(&api, "/v1/messages");
    let call = format!(
        "echo \"step holds: $ANTHROPIC_API_KEY\"; /usr/bin/curl -sS -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{{}}' {url}"
    );
    let out = gw.run(
        &["--credential", "ANTHROPIC_API_KEY"],
        &["/bin/sh", "-c", &call],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains(&format!("step holds: {PLACEHOLDER}")),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("{\"ok\":true}"), "{}", stdout(&out));
    let got = api.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].header("x-api-key"), Some(SECRET));
    assert!(!stdout(&out).contains(SECRET) && !stderr(&out).contains(SECRET));
}

#[test]
fn caged_python_urllib_reaches_the_api_with_the_key_in_a_bearer_header() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let script = format!(
        "import os, urllib.request\n\
         r = urllib.request.Request('{}', data=b'{{}}', headers={{'Authorization': 'Bearer ' + os.environ['ANTHROPIC_API_KEY']}})\n\
         print(urllib.request.urlopen(r).status)\n",
        api_url(&api, "/v1/messages")
    );
    let out = gw.run(
        &["--credential", "ANTHROPIC_API_KEY"],
        &["/usr/bin/python3", "-c", &script],
    );
    assert_eq!(stdout(&out).trim(), "200", "{}", stderr(&out));
    assert_eq!(
        api.received()[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
}

#[test]
fn a_placeholder_sent_outside_its_bound_path_is_refused_as_an_endpoint_mismatch() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let header = format!("x-api-key: {PLACEHOLDER}");
    let bad = curl(&api_url(&api, "/admin"), &["-H", &header]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&bad));
    assert!(
        stdout(&out).contains("403 [credential_endpoint_mismatch]"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(api.received().is_empty(), "nothing may reach the server");
    // control: the bound path
    let good = curl(&api_url(&api, "/v1/messages"), &["-H", &header]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&good));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
}

#[test]
fn another_cell_typing_the_placeholder_is_refused_as_a_caller_mismatch() {
    let api = ApiServer::start(&[API]);
    let extra = format!(
        "[[rule]]\nname = \"reviewers too\"\ncell = \"reviewer\"\nhosts = [\"{API}\"]\nports = [{}]\ntls = \"inspect\"\naddresses = [\"127.0.0.1\"]\n",
        api.port
    );
    let gw = Gateway::start(&worker_policy(&api, &extra));
    let header = format!("x-api-key: {PLACEHOLDER}");
    let call = curl(&api_url(&api, "/v1/messages"), &["-H", &header]);
    let out = gw.run(&["--cell-name", "reviewer"], &strs(&call));
    assert!(
        stdout(&out).contains("403 [credential_caller_mismatch]"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(api.received().is_empty());
    // control: the same call from the cell the credential is bound to
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
}

#[test]
fn a_cell_that_did_not_ask_for_the_credential_cannot_use_it() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let header = format!("x-api-key: {PLACEHOLDER}");
    let call = curl(&api_url(&api, "/v1/messages"), &["-H", &header]);
    let out = gw.run(&[], &strs(&call));
    assert!(
        stdout(&out).contains("403 [credential_not_granted]"),
        "{}",
        stdout(&out)
    );
    assert!(api.received().is_empty());
}

#[test]
fn an_unknown_placeholder_is_refused() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let call = curl(
        &api_url(&api, "/v1/messages"),
        &["-H", "x-api-key: nestbox:resolve:env:OPENAI_API_KEY"],
    );
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(
        stdout(&out).contains("403 [credential_unknown]"),
        "{}",
        stdout(&out)
    );
    assert!(api.received().is_empty());
}

#[test]
fn placeholders_resolve_in_basic_auth_path_segments_and_query_values() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let url = api_url(
        &api,
        &format!("/v1/bot{PLACEHOLDER}/send?key=nestbox%3Aresolve%3Aenv%3AANTHROPIC_API_KEY&x=1"),
    );
    let user = format!("user:{PLACEHOLDER}");
    let call = curl(&url, &["-u", &user]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(
        stdout(&out).contains("200 []"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let got = &api.received()[0];
    assert_eq!(got.path, format!("/v1/bot{SECRET}/send?key={SECRET}&x=1"));
    let basic = format!("Basic {}", b64(format!("user:{SECRET}").as_bytes()));
    assert_eq!(got.header("authorization"), Some(basic.as_str()));
}

#[test]
fn a_placeholder_in_a_body_is_refused_before_anything_reaches_the_server() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let body = format!("{{\"messages\":[\"my key is {PLACEHOLDER}\"]}}");
    let call = curl(&api_url(&api, "/v1/messages"), &["-d", &body]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(
        stdout(&out).contains("403 [placeholder_in_body]"),
        "{}",
        stdout(&out)
    );
    assert!(
        api.received().is_empty(),
        "refused before anything was sent"
    );
    // control: a body that only mentions the prefix passes untouched
    let body = "{\"text\":\"placeholders look like nestbox:resolve:env: followed by a name\"}";
    let call = curl(&api_url(&api, "/v1/messages"), &["-d", body]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
    assert_eq!(api.received()[0].body, body.as_bytes());
}

#[test]
fn a_body_larger_than_the_inspection_bound_is_refused_as_too_large() {
    let api = ApiServer::start(&[API]);
    let policy = worker_policy(&api, "").replace("[gateway]\n", "[gateway]\nmax_body = \"1KiB\"\n");
    let gw = Gateway::start(&policy);
    let big = "x".repeat(4096);
    let call = curl(&api_url(&api, "/v1/messages"), &["-d", &big]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(
        stdout(&out).contains("413 [body_too_large_to_inspect]"),
        "{}",
        stdout(&out)
    );
    assert!(api.received().is_empty());
    // control: within the bound
    let call = curl(&api_url(&api, "/v1/messages"), &["-d", "small"]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
}

#[test]
fn the_openshell_form_is_resolved_only_when_the_policy_accepts_it() {
    let api = ApiServer::start(&[API]);
    let header = "x-api-key: openshell:resolve:env:ANTHROPIC_API_KEY";
    let call = curl(&api_url(&api, "/v1/messages"), &["-H", header]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
    assert_eq!(
        api.received()[0].header("x-api-key"),
        Some("openshell:resolve:env:ANTHROPIC_API_KEY"),
        "not a placeholder unless enabled: passed as text"
    );
    drop(gw);
    let policy = worker_policy(&api, "")
        .replace("[gateway]\n", "[gateway]\nopenshell_placeholders = true\n");
    let gw = Gateway::start(&policy);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
    assert_eq!(api.received()[1].header("x-api-key"), Some(SECRET));
}

#[test]
fn a_secret_holding_a_newline_is_refused_when_the_gateway_starts() {
    let api = ApiServer::start(&[API]);
    let log = Gateway::try_start(
        &worker_policy(&api, ""),
        &[("GATEWAY_ANTHROPIC_KEY", "sk-line1\r\nX-Injected: 1")],
    )
    .err()
    .expect("the gateway must refuse to start");
    assert!(log.contains("CR, LF or NUL"), "{log}");
    assert!(
        !log.contains("sk-line1"),
        "the value is never printed: {log}"
    );
    // control: a clean value starts
    Gateway::try_start(
        &worker_policy(&api, ""),
        &[("GATEWAY_ANTHROPIC_KEY", "sk-clean")],
    )
    .unwrap();
}

#[test]
fn a_secret_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let api = ApiServer::start(&[API]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("anthropic.key");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let policy = worker_policy(&api, "").replace(
        "env = \"GATEWAY_ANTHROPIC_KEY\"",
        &format!("file = \"{}\"", file.display()),
    );
    let log = Gateway::try_start(&policy, &[]).err().expect("refused");
    assert!(log.contains("chmod 600"), "{log}");
    // control: mode 0600 works and the file's value is what the server gets
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let gw = Gateway::try_start(&policy, &[]).unwrap();
    let header = format!("x-api-key: {PLACEHOLDER}");
    let call = curl(&api_url(&api, "/v1/messages"), &["-H", &header]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
    assert_eq!(api.received()[0].header("x-api-key"), Some(SECRET));
}

#[test]
fn asking_for_a_credential_not_bound_to_the_cell_fails_before_the_step_starts() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let out = gw.run(
        &[
            "--credential",
            "ANTHROPIC_API_KEY",
            "--cell-name",
            "stranger",
        ],
        &["/bin/echo", "ran"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not to cell `stranger`"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("ran"));
    let out = gw.run(&["--credential", "NOPE"], &["/bin/echo", "ran"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("defines no credential `NOPE`"),
        "{}",
        stderr(&out)
    );
}

fn b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
