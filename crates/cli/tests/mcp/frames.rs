//! The raw protocol on `nestbox mcp`'s pipes: standard output carries JSON-RPC frames and
//! nothing else, whatever the commands, the hooks and the client's mistakes print.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::nestbox;

#[test]
fn stdout_carries_only_json_rpc_frames() {
    let work = tempfile::tempdir().unwrap();
    let hook = work.path().join("noisy-hook");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'hook noise on stderr' >&2\ncat >/dev/null\necho '{\"decision\":\"allow\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut child = Command::new(nestbox())
        .args(["mcp", "--backend", "local", "--hook"])
        .arg(&hook)
        .current_dir(work.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let call = |id: i64, command: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "run", "arguments": {"command": command}}})
        .to_string()
    };
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "raw", "version": "0"}}})
        .to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
        call(3, "echo to-stdout; echo to-stderr >&2; seq 1 20000"),
        call(4, "rm -rf /"),
        "this is not json".to_string(),
        json!({"jsonrpc": "2.0", "id": 5, "method": "resources/list"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "nope", "arguments": {}}})
        .to_string(),
    ];
    let mut stdin = child.stdin.take().unwrap();
    for r in &requests {
        writeln!(stdin, "{r}").unwrap();
    }
    drop(stdin);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();

    let mut ids = Vec::new();
    for line in stdout.lines() {
        let frame: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a line of stdout is not JSON ({e}): {line:.200}"));
        assert_eq!(frame["jsonrpc"], "2.0", "{line:.200}");
        assert!(
            frame.get("result").is_some() != frame.get("error").is_some(),
            "a frame needs exactly one of result and error: {line:.200}"
        );
        ids.push(frame["id"].clone());
    }
    ids.sort_by_key(|v| v.as_i64().unwrap_or(0));
    assert_eq!(
        ids,
        [
            Value::Null,
            json!(1),
            json!(2),
            json!(3),
            json!(4),
            json!(5),
            json!(6),
            json!(7)
        ],
        "one answer per request (the parse error has id null); stdout:\n{stdout:.2000}"
    );
    assert!(!stdout.contains("hook noise"));
    assert!(stderr.contains("hook noise on stderr"), "{stderr}");
    assert!(stderr.contains("nestbox mcp: serving on stdio"), "{stderr}");
    let big = stdout
        .lines()
        .find(|l| l.contains("\"id\":3"))
        .expect("answer 3");
    assert!(
        big.contains("20000\\n"),
        "the command's output is inside the frame"
    );
}
