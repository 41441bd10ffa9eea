//! The control socket: `<state dir>/control.sock`, a unix socket only the gateway's user (or
//! root) may use, speaking one JSON object per line.
//!
//! | request | answer |
//! |---|---|
//! | `{"op":"register","cell":"worker","step":"<id>","credentials":["K"]}` | `{"ok":true,"token":...,"listen":...,"ca_pem":...,"extra_roots_pem":...,"allow":[...]}` |
//! | `{"op":"step","step":"<id>"}` | `{"ok":true}`: names the step of this connection's cell |
//! | `{"op":"status"}` | `{"ok":true,...}` (see [`super::Shared::status_json`]) |
//! | `{"op":"reload"}` | the status after reloading |
//!
//! A registration lasts as long as the connection that made it: the launcher keeps it open for
//! the step's life, and the token dies with it. Steps cannot reach the socket at all: the cage's
//! seccomp filter refuses unix sockets.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use super::Shared;
use super::cells::Cell;

/// The control socket's path in a state directory.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// The state directory used when none is given: `$NESTBOX_GATEWAY_DIR`, else
/// `$XDG_STATE_HOME/nestbox/gateway`, else `~/.local/state/nestbox/gateway`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NESTBOX_GATEWAY_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("nestbox/gateway");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".local/state/nestbox/gateway");
    }
    // SAFETY: getuid has no failure mode.
    PathBuf::from(format!("/tmp/nestbox-gateway-{}", unsafe {
        libc::getuid()
    }))
}

/// Whether a cell name is usable: letters, digits, `.`, `_`, `-`, at most 64.
fn valid_cell_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Serves the control socket until the task is dropped.
pub(crate) async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tokio::task::spawn_local(connection(stream, shared.clone()));
    }
}

async fn connection(stream: tokio::net::UnixStream, shared: Arc<Shared>) {
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    let allowed = stream
        .peer_cred()
        .is_ok_and(|c| c.uid() == me || c.uid() == 0);
    let (read, mut write) = stream.into_split();
    if !allowed {
        let _ = write
            .write_all(
                b"{\"ok\":false,\"error\":\"the gateway's control socket is for its own user\"}\n",
            )
            .await;
        return;
    }
    let mut lines = tokio::io::BufReader::new(read).take(1 << 20).lines();
    let mut tokens: Vec<String> = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let answer = match serde_json::from_str::<Value>(&line) {
            Ok(req) => answer(&req, &shared, &mut tokens).await,
            Err(e) => json!({"ok": false, "error": format!("not a JSON object: {e}")}),
        };
        let mut out = answer.to_string();
        out.push('\n');
        if write.write_all(out.as_bytes()).await.is_err() {
            break;
        }
    }
    for t in tokens {
        shared.cells.unregister(&t);
    }
}

async fn answer(req: &Value, shared: &Arc<Shared>, tokens: &mut Vec<String>) -> Value {
    match req.get("op").and_then(Value::as_str) {
        Some("register") => register(req, shared, tokens),
        Some("status") => shared.status_json(),
        Some("step") => {
            let step: String = req
                .get("step")
                .and_then(Value::as_str)
                .unwrap_or("")
                .chars()
                .take(64)
                .collect();
            for t in tokens.iter() {
                shared.cells.set_step(t, &step);
            }
            json!({"ok": true})
        }
        Some("reload") => {
            super::reload::reload(shared.clone(), "requested on the control socket").await;
            shared.status_json()
        }
        other => {
            json!({"ok": false, "error": format!("unknown op {other:?}: expected register, status or reload")})
        }
    }
}

fn register(req: &Value, shared: &Arc<Shared>, tokens: &mut Vec<String>) -> Value {
    let name = req.get("cell").and_then(Value::as_str).unwrap_or("");
    if !valid_cell_name(name) {
        return json!({"ok": false, "error": format!("cell name `{name}`: use letters, digits, `.`, `_` and `-` (at most 64)")});
    }
    let step = req
        .get("step")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(64)
        .collect::<String>();
    let credentials: Vec<String> = req
        .get("credentials")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let generation = shared.current();
    for c in &credentials {
        if let Err(e) = generation.check_grant(name, c) {
            return json!({"ok": false, "error": e});
        }
    }
    let token = shared.cells.register(Cell {
        name: name.to_string(),
        id: step,
        credentials,
        since: String::new(),
    });
    tokens.push(token.clone());
    json!({
        "ok": true,
        "token": token,
        "listen": shared.listen.to_string(),
        "ca_pem": shared.ca.cert_pem(),
        "extra_roots_pem": generation.extra_roots_pem,
        "allow": generation.cell_endpoints(name),
        "generation": generation.number,
    })
}

/// A cell registered with a running gateway. Keep it alive for as long as the step runs:
/// dropping it closes the control connection, and the gateway forgets the token.
pub struct Registration {
    /// The token the cell's relay sends. Never print it.
    pub token: String,
    /// The gateway's proxy address.
    pub listen: String,
    /// The gateway CA (PEM).
    pub ca_pem: String,
    /// Extra upstream roots the gateway trusts (PEM; may be empty).
    pub extra_roots_pem: String,
    /// Relay allow entries for what the policy lets this cell reach.
    pub allow: Vec<String>,
    conn: UnixStream,
}

impl Registration {
    /// Tells the gateway the step id of the registered cell (known only once the step is
    /// prepared), for its audit lines and status.
    pub fn set_step(&mut self, step: &str) -> Result<(), String> {
        exchange(&mut self.conn, &json!({"op": "step", "step": step})).map(|_| ())
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registration(listen {}, token ***)", self.listen)
    }
}

fn connect(dir: &Path) -> Result<UnixStream, String> {
    let path = socket_path(dir);
    let s = UnixStream::connect(&path).map_err(|e| {
        format!(
            "no gateway answers on {} ({e}): start one with `nestbox gateway --policy FILE`, or \
             point at its state directory (--gateway-dir, NESTBOX_GATEWAY_DIR)",
            path.display()
        )
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    Ok(s)
}

fn exchange(stream: &mut UnixStream, req: &Value) -> Result<Value, String> {
    let mut line = req.to_string();
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("control socket: {e}"))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut answer = String::new();
    reader
        .read_line(&mut answer)
        .map_err(|e| format!("control socket: {e}"))?;
    let v: Value = serde_json::from_str(&answer)
        .map_err(|e| format!("control socket: unreadable answer: {e}"))?;
    if v.get("ok").and_then(Value::as_bool) != Some(true) {
        return Err(v
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the gateway refused")
            .to_string());
    }
    Ok(v)
}

/// Sends one request (`status`, `reload`) and returns the answer.
pub fn request(dir: &Path, req: &Value) -> Result<Value, String> {
    let mut s = connect(dir)?;
    exchange(&mut s, req)
}

/// Registers a cell named `cell` for step `step`, asking for `credentials`.
pub fn register_cell(
    dir: &Path,
    cell: &str,
    step: &str,
    credentials: &[String],
) -> Result<Registration, String> {
    let mut s = connect(dir)?;
    let v = exchange(
        &mut s,
        &json!({"op": "register", "cell": cell, "step": step, "credentials": credentials}),
    )?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Ok(Registration {
        token: text("token"),
        listen: text("listen"),
        ca_pem: text("ca_pem"),
        extra_roots_pem: text("extra_roots_pem"),
        allow: v
            .get("allow")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        conn: s,
    })
}
