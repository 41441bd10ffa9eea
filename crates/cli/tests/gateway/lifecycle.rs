//! The gateway's life and the cells': a killed gateway fails closed (nothing bypasses it), and a
//! cell's registration ends with its step.

use std::time::Duration;

use crate::common::{stderr, stdout};
use crate::support::*;

#[test]
fn a_gateway_killed_mid_request_fails_closed_and_nothing_bypasses_it() {
    let api = ApiServer::start(&[API]);
    let mut gw = Gateway::start(&worker_policy(&api, ""));
    api.set_delay(Duration::from_secs(3));
    let url = api_url(&api, "/v1/messages");
    let script = format!(
        "/usr/bin/curl -sS -m 20 -H \"x-api-key: $ANTHROPIC_API_KEY\" {url} -w ' first %{{http_code}}\\n'; echo \"first exit $?\"; \
         /usr/bin/curl -sS -m 20 -v -H \"x-api-key: $ANTHROPIC_API_KEY\" {url} -w ' second %{{http_code}}\\n' 2>&1; echo \"second exit $?\""
    );
    let child = gw
        .run_cmd(
            &["--credential", "ANTHROPIC_API_KEY"],
            &["/bin/sh", "-c", &script],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the first request at the server",
        || !api.received().is_empty(),
    );
    gw.kill();
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(!text.contains("first 200"), "{text}{}", stderr(&out));
    assert!(!text.contains("first exit 0"), "{text}");
    assert!(
        text.contains("X-Nestbox-Denied: upstream_unreachable"),
        "{text}"
    );
    assert!(!text.contains("second exit 0"), "{text}");
    let got = api.received();
    assert_eq!(
        got.len(),
        1,
        "only the first request, sent before the kill: {got:?}"
    );
    assert_eq!(got[0].header("x-api-key"), Some(SECRET));
}

#[test]
fn no_step_starts_when_no_gateway_answers() {
    let api = ApiServer::start(&[API]);
    let mut gw = Gateway::start(&worker_policy(&api, ""));
    gw.kill();
    let out = gw.run(
        &["--credential", "ANTHROPIC_API_KEY"],
        &["/bin/echo", "ran"],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("no gateway answers"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("ran"));
}

#[test]
fn a_cell_is_registered_while_its_step_runs_and_forgotten_after() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let flag = gw.work.path().join("running");
    let script = format!("touch {}; sleep 2", flag.display());
    let child = gw
        .run_cmd(
            &["--credential", "ANTHROPIC_API_KEY"],
            &["/bin/sh", "-c", &script],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(20), "the step", || flag.exists());
    let cells = gw.status()["cells"].as_array().unwrap().clone();
    assert_eq!(cells.len(), 1, "{cells:?}");
    assert_eq!(cells[0]["name"], "worker");
    assert_eq!(cells[0]["credentials"][0], "ANTHROPIC_API_KEY");
    assert!(cells[0]["id"].as_str().unwrap().len() == 16, "{cells:?}");
    let _ = child.wait_with_output();
    eventually(Duration::from_secs(10), "the cell forgotten", || {
        gw.status()["cells"].as_array().unwrap().is_empty()
    });
}
