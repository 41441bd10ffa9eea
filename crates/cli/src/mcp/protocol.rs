//! The MCP transport over stdio: JSON-RPC 2.0 messages, one per line, on standard input and
//! standard output. A small hand-written subset (initialize, ping, tools/list, tools/call,
//! notifications/cancelled) instead of the rmcp SDK: it adds no crate to the build (rmcp would
//! add about 25, with schemars, chrono and a second proc-macro stack), and it makes the one
//! rule that matters here structural: a single writer task owns standard output and writes
//! nothing but whole JSON-RPC frames. Everything else nestbox prints goes to standard error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::tools::Tools;

/// Protocol versions this server speaks, newest first. A client asking for one of them gets
/// it; a client asking for another gets the newest, and decides whether it can go on.
pub const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

fn response(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// Serves MCP on standard input and output until the client closes standard input.
pub async fn serve(tools: Arc<Tools>, instructions: String) -> std::io::Result<()> {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(msg) = out_rx.recv().await {
            let mut line = serde_json::to_vec(&msg).expect("frames serialize");
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let in_flight: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => match line? {
                Some(line) => line,
                None => break,
            },
            _ = term.recv() => return stop(&in_flight, "SIGTERM"),
            _ = interrupt.recv() => return stop(&in_flight, "SIGINT"),
        };
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = out_tx.send(error(Value::Null, PARSE_ERROR, format!("not JSON: {e}")));
                continue;
            }
        };
        let Some(obj) = msg.as_object() else {
            let _ = out_tx.send(error(
                Value::Null,
                INVALID_REQUEST,
                "expected one JSON-RPC object per line (batches are not supported)",
            ));
            continue;
        };
        let id = obj.get("id").cloned();
        let Some(method) = obj.get("method").and_then(Value::as_str) else {
            // A response to a request we never send, or junk without a method.
            if let Some(id) = id
                && !obj.contains_key("result")
                && !obj.contains_key("error")
            {
                let _ = out_tx.send(error(id, INVALID_REQUEST, "no method"));
            }
            continue;
        };
        let params = obj.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id else {
            if method == "notifications/cancelled"
                && let Some(req) = params.get("requestId")
                && let Some(task) = in_flight
                    .lock()
                    .expect("in flight")
                    .remove(&req.to_string())
            {
                task.abort();
                eprintln!("nestbox mcp: request {req} cancelled by the client");
            }
            continue;
        };
        match method {
            "initialize" => {
                let asked = params.get("protocolVersion").and_then(Value::as_str);
                let version = asked
                    .filter(|v| VERSIONS.contains(v))
                    .unwrap_or(VERSIONS[0]);
                let _ = out_tx.send(response(
                    id,
                    json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": false}},
                        "serverInfo": {"name": "nestbox", "version": env!("CARGO_PKG_VERSION")},
                        "instructions": instructions,
                    }),
                ));
            }
            "ping" => {
                let _ = out_tx.send(response(id, json!({})));
            }
            "tools/list" => {
                let _ = out_tx.send(response(id, json!({"tools": Tools::definitions()})));
            }
            "tools/call" => {
                let Some(name) = params.get("name").and_then(Value::as_str) else {
                    let _ = out_tx.send(error(id, INVALID_PARAMS, "tools/call needs a name"));
                    continue;
                };
                if !Tools::exists(name) {
                    let _ =
                        out_tx.send(error(id, INVALID_PARAMS, format!("unknown tool `{name}`")));
                    continue;
                }
                let name = name.to_owned();
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                let tools = tools.clone();
                let tx = out_tx.clone();
                let key = id.to_string();
                let registry = in_flight.clone();
                let done_key = key.clone();
                // Registered before the task can finish: it removes itself under the same lock,
                // and a cancelled (removed) call sends no response, as the protocol asks.
                let mut running = in_flight.lock().expect("in flight");
                let task = tokio::spawn(async move {
                    let result = tools.call(&name, args).await;
                    if registry
                        .lock()
                        .expect("in flight")
                        .remove(&done_key)
                        .is_some()
                    {
                        let _ = tx.send(response(id, result));
                    }
                });
                running.insert(key, task.abort_handle());
            }
            other => {
                let _ = out_tx.send(error(
                    id,
                    METHOD_NOT_FOUND,
                    format!("method `{other}` is not supported"),
                ));
            }
        }
    }
    // The client closed standard input. Calls still running finish (their timeouts bound
    // them) and their answers are written; a client in a hurry sends SIGTERM.
    drop(out_tx);
    let _ = writer.await;
    Ok(())
}

/// Drops every call still running, which ends their commands (a backend kills what a dropped
/// call started), and returns.
fn stop(
    in_flight: &Mutex<HashMap<String, tokio::task::AbortHandle>>,
    why: &str,
) -> std::io::Result<()> {
    let running: Vec<_> = in_flight.lock().expect("in flight").drain().collect();
    eprintln!(
        "nestbox mcp: {why}: stopping ({} call(s) dropped)",
        running.len()
    );
    for (_, task) in running {
        task.abort();
    }
    Ok(())
}
