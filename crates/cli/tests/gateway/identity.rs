//! Program identity: a caller nestbox did not start is known by the executable of the process
//! that owns the client socket (`/proc/<pid>/exe`), never by what it says about itself. Two
//! binaries of this machine get different answers; descendants are covered only when asked.

use std::process::Command;
use std::time::Duration;

use crate::common::{output_within, stderr, stdout};
use crate::support::*;

fn program_policy(api: &ApiServer, program: &str, descendants: bool) -> String {
    format!(
        r#"[[rule]]
name = "only this program"
program = "{program}"
descendants = {descendants}
hosts = ["other.test"]
ports = [{}]
addresses = ["127.0.0.1"]
"#,
        api.port
    )
}

/// curl through the gateway to other.test, outside any cage: (status line of the tunnel or
/// response, the X-Nestbox-Denied value if any).
fn curl_via(gw: &Gateway, api: &ApiServer, shell: bool) -> String {
    let url = format!("https://other.test:{}/x", api.port);
    let args = [
        "-sS",
        "-v",
        "-o",
        "/dev/null",
        "--proxy",
        &gw.url(),
        "--cacert",
        api.ca.to_str().unwrap(),
        &url,
    ];
    let out = if shell {
        let line = format!("/usr/bin/curl {}; true", args.join(" "));
        output_within(
            Command::new("/bin/sh").args(["-c", &line]),
            Duration::from_secs(30),
        )
    } else {
        output_within(
            Command::new("/usr/bin/curl").args(args),
            Duration::from_secs(30),
        )
    };
    stderr(&out)
}

fn python_connect(gw: &Gateway, api: &ApiServer) -> String {
    let script = format!(
        "import http.client\n\
         c = http.client.HTTPConnection('127.0.0.1', {})\n\
         c.request('CONNECT', 'other.test:{}')\n\
         r = c.getresponse()\n\
         print(r.status, r.getheader('X-Nestbox-Denied'))\n",
        gw.port, api.port
    );
    let out = output_within(
        Command::new("/usr/bin/python3").args(["-c", &script]),
        Duration::from_secs(30),
    );
    stdout(&out)
}

#[test]
fn curl_is_let_through_and_python_is_refused_by_a_rule_naming_curl() {
    let api = ApiServer::start(&["other.test"]);
    let gw = Gateway::start(&program_policy(&api, "/usr/bin/curl", false));
    let log = curl_via(&gw, &api, false);
    assert!(log.contains("< HTTP/1.1 200 OK"), "{log}");
    assert_eq!(python_connect(&gw, &api).trim(), "403 no_matching_rule");
    let audit = gw.audit_lines();
    assert!(
        audit
            .iter()
            .any(|l| l["actor"]["exe"] == "/usr/bin/python3.11"
                || l["actor"]["exe"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("/usr/bin/python3"))),
        "{audit:?}"
    );
}

#[test]
fn python_is_let_through_by_a_rule_naming_its_real_executable() {
    let api = ApiServer::start(&["other.test"]);
    // /usr/bin/python3 is a symlink: the rule names what /proc/PID/exe shows
    let gw = Gateway::start(&program_policy(&api, "/usr/bin/python3*", false));
    assert_eq!(python_connect(&gw, &api).trim(), "200 None");
    let log = curl_via(&gw, &api, false);
    assert!(log.contains("X-Nestbox-Denied: no_matching_rule"), "{log}");
}

#[test]
fn a_rule_covers_what_its_program_spawns_only_when_it_says_descendants() {
    let api = ApiServer::start(&["other.test"]);
    let shell = std::fs::canonicalize("/bin/sh").unwrap();
    let shell = shell.to_str().unwrap();
    let gw = Gateway::start(&program_policy(&api, shell, false));
    let log = curl_via(&gw, &api, true);
    assert!(log.contains("X-Nestbox-Denied: no_matching_rule"), "{log}");
    drop(gw);
    let gw = Gateway::start(&program_policy(&api, shell, true));
    let log = curl_via(&gw, &api, true);
    assert!(log.contains("< HTTP/1.1 200 OK"), "{log}");
}

#[test]
fn a_forged_cell_token_is_refused() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let url = api_url(&api, "/v1/messages");
    let out = output_within(
        Command::new("/usr/bin/curl").args([
            "-sS",
            "-v",
            "--proxy",
            &gw.url(),
            "--proxy-user",
            "cell:0000000000000000000000000000000000000000000000000000000000000000",
            &url,
        ]),
        Duration::from_secs(30),
    );
    assert!(
        stderr(&out).contains("X-Nestbox-Denied: cell_token_invalid"),
        "{}",
        stderr(&out)
    );
    assert!(api.received().is_empty());
}
