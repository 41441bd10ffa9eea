//! A fake Daytona API following the shapes of Daytona's published clients
//! (`daytona-api-client`, `daytona-toolbox-api-client`): `/sandbox` for the lifecycle and
//! `/toolbox/{id}/process/session` for commands, camelCase JSON, Bearer auth. Session commands
//! run as real processes: the command text is written to a fresh `sh`'s standard input (as
//! the daemon writes it to the session's shell), with standard output and error kept apart.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

/// The marker every fake session command carries in its environment.
pub const MARKER: &str = "FAKE_DAYTONA_SANDBOX";

/// One recorded request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: String,
    pub body: Value,
}

/// What the fake knows.
#[derive(Default)]
pub struct State {
    pub key: String,
    pub requests: Mutex<Vec<Seen>>,
    /// id → sandbox JSON.
    pub sandboxes: Mutex<HashMap<String, Value>>,
    url: Mutex<String>,
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

impl State {
    fn find(&self, id_or_name: &str) -> Option<(String, Value)> {
        self.sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|(id, v)| *id == id_or_name || v["name"] == id_or_name)
            .map(|(k, v)| (k.clone(), v.clone()))
    }

    fn set_state(&self, id: &str, state: &str) {
        if let Some(s) = self.sandboxes.lock().unwrap().get_mut(id) {
            s["state"] = json!(state);
        }
    }

    async fn handle(self: Arc<Self>, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let method = req.method().to_string();
        let path = req.uri().path().to_string();
        let authorization = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        self.requests.lock().unwrap().push(Seen {
            method: method.clone(),
            path: path.clone(),
            authorization: authorization.clone(),
            body: body.clone(),
        });
        if authorization != format!("Bearer {}", self.key) {
            return reply(
                StatusCode::UNAUTHORIZED,
                json!({"statusCode": 401, "message": "Invalid API key"}),
            );
        }
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method.as_str(), parts.as_slice()) {
            ("GET", ["sandbox"]) => {
                let all: Vec<Value> = self.sandboxes.lock().unwrap().values().cloned().collect();
                reply(StatusCode::OK, json!(all))
            }
            ("POST", ["sandbox"]) => {
                if let Some(n) = body["name"].as_str()
                    && self.find(n).is_some()
                {
                    return reply(
                        StatusCode::CONFLICT,
                        json!({"message": format!("Sandbox with name {n} already exists")}),
                    );
                }
                let id = format!("sbx-{}", nestbox_exec::job::random_token(6));
                let url = self.url.lock().unwrap().clone();
                let mut sb = body.clone();
                sb["id"] = json!(id);
                // Starts "creating"; the first look afterwards finds it started.
                sb["state"] = json!("creating");
                sb["toolboxProxyUrl"] = json!(format!("{url}/toolbox"));
                self.sandboxes.lock().unwrap().insert(id, sb.clone());
                reply(StatusCode::OK, sb)
            }
            ("GET", ["sandbox", id]) => match self.find(id) {
                Some((real, sb)) => {
                    if sb["state"] == "creating" || sb["state"] == "starting" {
                        self.set_state(&real, "started");
                    }
                    reply(StatusCode::OK, sb)
                }
                None => reply(
                    StatusCode::NOT_FOUND,
                    json!({"message": "Sandbox not found"}),
                ),
            },
            ("POST", ["sandbox", id, action]) => {
                let Some((real, _)) = self.find(id) else {
                    return reply(
                        StatusCode::NOT_FOUND,
                        json!({"message": "Sandbox not found"}),
                    );
                };
                match *action {
                    "start" => self.set_state(&real, "starting"),
                    "stop" => {
                        super::kill_marked(MARKER, &real);
                        self.set_state(&real, "stopped");
                    }
                    _ => return reply(StatusCode::NOT_FOUND, json!({"message": "no such action"})),
                }
                reply(StatusCode::OK, self.find(&real).unwrap().1)
            }
            ("DELETE", ["sandbox", id]) => {
                let Some((real, _)) = self.find(id) else {
                    return reply(
                        StatusCode::NOT_FOUND,
                        json!({"message": "Sandbox not found"}),
                    );
                };
                super::kill_marked(MARKER, &real);
                self.set_state(&real, "destroyed");
                reply(StatusCode::OK, self.find(&real).unwrap().1)
            }
            ("POST", ["toolbox", id, "process", "session"]) => match self.find(id) {
                Some((_, sb)) if sb["state"] == "started" => reply(StatusCode::CREATED, json!({})),
                _ => reply(
                    StatusCode::BAD_REQUEST,
                    json!({"message": "sandbox is not started"}),
                ),
            },
            ("POST", ["toolbox", id, "process", "session", _session, "exec"]) => {
                let Some((real, sb)) = self.find(id) else {
                    return reply(
                        StatusCode::NOT_FOUND,
                        json!({"message": "Sandbox not found"}),
                    );
                };
                if sb["state"] != "started" {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        json!({"message": "sandbox is not started"}),
                    );
                }
                let command = body["command"].as_str().unwrap_or_default().to_string();
                let out = run_in_shell(&real, &command).await;
                reply(
                    StatusCode::OK,
                    json!({
                        "cmdId": format!("cmd-{}", nestbox_exec::job::random_token(4)),
                        "exitCode": out.0,
                        "stdout": out.1,
                        "stderr": out.2,
                    }),
                )
            }
            ("DELETE", ["toolbox", _id, "process", "session", _session]) => {
                reply(StatusCode::NO_CONTENT, json!({}))
            }
            _ => reply(
                StatusCode::NOT_FOUND,
                json!({"message": format!("no route {method} {path}")}),
            ),
        }
    }
}

async fn run_in_shell(sandbox: &str, command: &str) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("/bin/sh")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/tmp")
        .env(MARKER, sandbox)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sh");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(command.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running fake; kills its sandboxes' processes when dropped.
pub struct FakeDaytona {
    pub url: String,
    pub state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeDaytona {
    /// Starts a fake on a free port of 127.0.0.1 that accepts `key`.
    pub async fn start(key: &str) -> FakeDaytona {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            key: key.into(),
            ..State::default()
        });
        *state.url.lock().unwrap() = url.clone();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, std::convert::Infallible>(st.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeDaytona { url, state, task }
    }

    /// "METHOD /path" of every request so far.
    pub fn routes(&self) -> Vec<String> {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }
}

impl Drop for FakeDaytona {
    fn drop(&mut self) {
        for id in self.state.sandboxes.lock().unwrap().keys() {
            super::kill_marked(MARKER, id);
        }
        self.task.abort();
    }
}
