//! The secret never leaves the gateway except towards the server it is bound to: a full session
//! (allowed calls, refusals, status, a reload) and then a search of everything written.

use std::time::Duration;

use crate::common::{stderr, stdout};
use crate::support::*;

#[test]
fn a_whole_session_writes_the_secret_nowhere_but_to_the_bound_server() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let relay_audit = gw.work.path().join("relay-audit.jsonl");
    let report = gw.work.path().join("report.json");
    let header = format!("x-api-key: {PLACEHOLDER}");
    let ok = curl(&api_url(&api, "/v1/messages"), &["-H", &header, "-d", "{}"]);
    let elsewhere = curl(&api_url(&api, "/admin"), &["-H", &header]);
    let in_body = curl(&api_url(&api, "/v1/messages"), &["-d", PLACEHOLDER]);
    let script = format!(
        "env; cat \"$SSL_CERT_FILE\" | head -c 100; {} ; {} ; {}",
        shell(&ok),
        shell(&elsewhere),
        shell(&in_body)
    );
    let out = gw.run(
        &[
            "--credential",
            "ANTHROPIC_API_KEY",
            "--audit",
            relay_audit.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
        &["/bin/sh", "-c", &script],
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("200 []"), "{text}");
    assert!(
        text.contains("403 [credential_endpoint_mismatch]"),
        "{text}"
    );
    assert!(text.contains("403 [placeholder_in_body]"), "{text}");
    assert!(
        text.contains(&format!("ANTHROPIC_API_KEY={PLACEHOLDER}")),
        "{text}"
    );
    assert!(
        !text.contains("http://cell:"),
        "the cell token is not in the step's environment: {text}"
    );
    gw.signal(libc::SIGHUP);
    eventually(Duration::from_secs(10), "the reload", || {
        gw.status()["generation"] == 2
    });
    let status = gw.status().to_string();

    // the server got it, once
    assert_eq!(api.received().len(), 1);
    assert_eq!(api.received()[0].header("x-api-key"), Some(SECRET));
    // and nothing else anywhere
    assert!(!text.contains(SECRET), "step output: {text}");
    assert!(!status.contains(SECRET), "status: {status}");
    let mut searched = files_below(gw.work.path());
    searched.extend(
        files_below(std::path::Path::new("/tmp"))
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("nestbox-trust-")),
    );
    assert!(searched.iter().any(|p| p.ends_with("audit.jsonl")));
    assert!(searched.iter().any(|p| p.ends_with("gateway.log")));
    assert!(searched.iter().any(|p| p.ends_with("relay-audit.jsonl")));
    for file in searched {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let hit = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!hit, "the secret is in {}", file.display());
    }
    let audit = gw.audit_lines();
    assert!(
        audit
            .iter()
            .any(|l| l["credentials"][0] == "ANTHROPIC_API_KEY"),
        "credential names are audited: {audit:?}"
    );
}

fn shell(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every `/proc/*/environ` and `/proc/*/cmdline` readable here that holds a cell token.
/// (The needle is built from two parts so that the scanner's own command line does not hold it.)
const FIND_TOKENS: &str = r#"import glob
needle = b'http:/' + b'/cell:'
hits = []
for p in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):
    try:
        if needle in open(p, 'rb').read():
            hits.append(p)
    except OSError:
        pass
print('hits', len(hits))
"#;

#[test]
fn the_step_cannot_find_its_cell_token_in_any_process_while_its_relay_holds_it() {
    let api = ApiServer::start(&[API]);
    let gw = Gateway::start(&worker_policy(&api, ""));
    let flag = gw.work.path().join("scan-now");
    let done = gw.work.path().join("scanned");
    let script = format!(
        "import os, time, subprocess\n\
         open('{flag}', 'w').close()\n\
         exec(compile({FIND_TOKENS:?}, 'scan', 'exec'))\n\
         while not os.path.exists('{done}'):\n    time.sleep(0.05)\n",
        flag = flag.display(),
        done = done.display(),
    );
    let child = gw
        .run_cmd(
            &["--credential", "ANTHROPIC_API_KEY"],
            &["/usr/bin/python3", "-c", &script],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(20), "the step", || flag.exists());
    // control: from outside the cage, the relay's environment holds the token
    let outside = crate::common::output_within(
        std::process::Command::new("/usr/bin/python3").args(["-c", FIND_TOKENS]),
        Duration::from_secs(20),
    );
    std::fs::write(&done, "").unwrap();
    let inside = child.wait_with_output().unwrap();
    assert_ne!(
        stdout(&outside).trim(),
        "hits 0",
        "the control must see the relay's token"
    );
    assert_eq!(stdout(&inside).trim(), "hits 0", "{}", stderr(&inside));
}
