//! Reloading: on file change and on SIGHUP. A valid policy applies to new connections; an
//! invalid one is refused with its full error in the log and in `nestbox gateway status`, and the
//! last valid policy stays in force.

use std::process::Command;
use std::time::Duration;

use crate::common::{nestbox_bin, output_within, stdout};
use crate::support::*;

fn generation(gw: &Gateway) -> u64 {
    gw.status()["generation"].as_u64().unwrap()
}

#[test]
fn a_valid_new_policy_applies_to_new_connections() {
    let api = ApiServer::start(&[API]);
    let v1 = worker_policy(&api, "").replace(
        "tls = \"inspect\"",
        "tls = \"inspect\"\npaths = [\"/v1/**\"]",
    );
    let gw = Gateway::start(&v1);
    let call = curl(&api_url(&api, "/v2/models"), &[]);
    let out = gw.run(&[], &strs(&call));
    assert!(
        stdout(&out).contains("403 [request_not_allowed]"),
        "{}",
        stdout(&out)
    );
    gw.write_policy(&v1.replace("paths = [\"/v1/**\"]", "paths = [\"/v1/**\", \"/v2/**\"]"));
    eventually(Duration::from_secs(10), "the reload", || {
        generation(&gw) == 2
    });
    let out = gw.run(&[], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
    assert!(gw.log_text().contains("generation 2"), "{}", gw.log_text());
}

#[test]
fn an_invalid_policy_is_refused_and_the_last_valid_one_stays_in_force() {
    let api = ApiServer::start(&[API]);
    let good = worker_policy(&api, "");
    let gw = Gateway::start(&good);
    let bad = format!(
        "{good}\n[[rule]]\nname = \"tunnel everything\"\nany = true\nhosts = [\"{API}\"]\nports = [{}]\ntls = \"passthrough\"\n",
        api.port
    );
    gw.write_policy(&bad);
    eventually(Duration::from_secs(10), "the refusal", || {
        !gw.status()["reload"]["last_error"].is_null()
    });
    let status = gw.status();
    let error = status["reload"]["last_error"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("endpoint ambiguity"), "{error}");
    assert!(
        error.contains("gateway.toml:"),
        "the error names file, line and column: {error}"
    );
    assert_eq!(status["generation"], 1, "the last valid generation stays");
    assert!(
        gw.log_text().contains(&error),
        "the full error is in the log: {}",
        gw.log_text()
    );
    let human = output_within(
        Command::new(nestbox_bin())
            .args(["gateway", "status", "--dir"])
            .arg(&gw.state),
        Duration::from_secs(10),
    );
    assert!(
        stdout(&human).contains("last reload REFUSED"),
        "{}",
        stdout(&human)
    );
    assert!(
        stdout(&human).contains("endpoint ambiguity"),
        "{}",
        stdout(&human)
    );
    // the old policy still answers: inspected, key injected
    let header = format!("x-api-key: {PLACEHOLDER}");
    let call = curl(&api_url(&api, "/v1/messages"), &["-H", &header]);
    let out = gw.run(&["--credential", "ANTHROPIC_API_KEY"], &strs(&call));
    assert!(stdout(&out).contains("200 []"), "{}", stdout(&out));
    assert_eq!(api.received()[0].header("x-api-key"), Some(SECRET));
    // fixing the file clears the error
    gw.write_policy(&good.replace("name = \"workers reach the API\"", "name = \"fixed\""));
    eventually(Duration::from_secs(10), "the fix", || generation(&gw) == 2);
    assert!(gw.status()["reload"]["last_error"].is_null());
}

#[test]
fn sighup_reloads_the_policy() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    gw.signal(libc::SIGHUP);
    eventually(Duration::from_secs(10), "the reload", || {
        generation(&gw) == 2
    });
    assert!(gw.log_text().contains("(SIGHUP)"), "{}", gw.log_text());
}
