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

/// Connects to the gateway from Python, optionally hands the socket to a child running another
/// program, then asks for a tunnel: the status and `X-Nestbox-Denied`.
fn connect_with_shared_socket(gw: &Gateway, api: &ApiServer, share: bool) -> String {
    let script = format!(
        "import os, socket, subprocess, time\n\
         s = socket.create_connection(('127.0.0.1', {gw}))\n\
         child = None\n\
         if {share}:\n\
         \x20   os.set_inheritable(s.fileno(), True)\n\
         \x20   child = subprocess.Popen(['/bin/sleep', '5'], pass_fds=[s.fileno()])\n\
         \x20   time.sleep(0.3)\n\
         s.sendall(b'CONNECT other.test:{port} HTTP/1.1\\r\\nHost: other.test:{port}\\r\\n\\r\\n')\n\
         head = s.recv(4096).decode()\n\
         denied = [l.split(':', 1)[1].strip() for l in head.split('\\r\\n') if l.lower().startswith('x-nestbox-denied')]\n\
         print(head.split(' ')[1], denied[0] if denied else '-')\n\
         if child: child.kill()\n",
        gw = gw.port,
        port = api.port,
        share = if share { "True" } else { "False" },
    );
    let out = output_within(
        Command::new("/usr/bin/python3").args(["-c", &script]),
        Duration::from_secs(30),
    );
    format!("{}{}", stdout(&out), stderr(&out))
}

#[test]
fn a_socket_shared_by_two_different_programs_is_refused_as_ambiguous() {
    let api = ApiServer::start(&["other.test"]);
    let policy = format!(
        "[[rule]]\nname = \"anyone\"\nany = true\nhosts = [\"other.test\"]\nports = [{}]\naddresses = [\"127.0.0.1\"]\n",
        api.port
    );
    let gw = Gateway::start(&policy);
    assert_eq!(
        connect_with_shared_socket(&gw, &api, true).trim(),
        "403 caller_ambiguous"
    );
    // control: the same connection held by one program
    assert_eq!(connect_with_shared_socket(&gw, &api, false).trim(), "200 -");
}
