//! Daytona's REST API as the backend uses it: the control plane (`/sandbox`: create, find by
//! id or name, start, stop, delete) and a sandbox's toolbox (`/process/session`: create a
//! session, execute in it with standard output and standard error apart, delete it). Field
//! names are Daytona's (camelCase on the wire). Every request carries
//! `Authorization: Bearer <DAYTONA_API_KEY>`.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::BackendKind;
use crate::error::{ExecError, Result};

/// A sandbox as the API describes it (the fields the backend reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Sandbox {
    pub id: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub error_reason: Option<String>,
    #[serde(default)]
    pub toolbox_proxy_url: Option<String>,
}

/// What a session command returned.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionExec {
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub stdout: Option<String>,
    #[serde(default)]
    pub stderr: Option<String>,
    #[serde(default)]
    pub output: Option<String>,
}

/// The API client.
#[derive(Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
    /// Where the key came from, for errors (never the key).
    pub key_source: String,
}

fn engine(action: &str, message: String) -> ExecError {
    ExecError::Engine {
        backend: BackendKind::Daytona,
        action: action.into(),
        message,
    }
}

impl Api {
    /// A client for `base` (the API URL) with `key`.
    pub fn new(base: &str, key: String, key_source: String, timeout: Duration) -> Result<Api> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("nestbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ExecError::Unavailable {
                backend: BackendKind::Daytona,
                reason: format!("cannot build the HTTPS client: {e}"),
                hint: None,
            })?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
            key_source,
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
        action: &str,
    ) -> Result<(u16, Value)> {
        let mut req = self.http.request(method, url).bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| ExecError::Connection {
            backend: BackendKind::Daytona,
            action: action.into(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status == 401 || status == 403 {
            return Err(ExecError::Unavailable {
                backend: BackendKind::Daytona,
                reason: format!(
                    "the API refused the key from {} (HTTP {status}) while trying to {action}",
                    self.key_source
                ),
                hint: Some(
                    "check DAYTONA_API_KEY (or api_key_file) and the organization it belongs to"
                        .into(),
                ),
            });
        }
        Ok((status, value))
    }

    fn failed(action: &str, status: u16, body: &Value) -> ExecError {
        let msg = body
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| body.to_string());
        engine(action, format!("HTTP {status}: {msg}"))
    }

    /// Checks the key with one cheap call.
    pub async fn check(&self) -> Result<()> {
        let action = "list sandboxes (checking the API key)";
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("{}/sandbox", self.base),
                None,
                action,
            )
            .await
            .map_err(|e| match e {
                ExecError::Connection { message, .. } => ExecError::Unavailable {
                    backend: BackendKind::Daytona,
                    reason: format!("cannot reach {}: {message}", self.base),
                    hint: Some("check api_url (DAYTONA_API_URL)".into()),
                },
                other => other,
            })?;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(Self::failed(action, status, &body))
        }
    }

    /// The sandbox with this id or name, if it exists.
    pub async fn find(&self, id_or_name: &str) -> Result<Option<Sandbox>> {
        let action = format!("find sandbox {id_or_name}");
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("{}/sandbox/{id_or_name}", self.base),
                None,
                &action,
            )
            .await?;
        match status {
            404 => Ok(None),
            200..=299 => serde_json::from_value(body)
                .map(Some)
                .map_err(|e| engine(&action, format!("unexpected answer: {e}"))),
            _ => Err(Self::failed(&action, status, &body)),
        }
    }

    /// Creates a sandbox from a `CreateSandbox` body.
    pub async fn create(&self, body: Value) -> Result<Sandbox> {
        let action = "create a sandbox";
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                &format!("{}/sandbox", self.base),
                Some(body),
                action,
            )
            .await?;
        if !(200..300).contains(&status) {
            return Err(Self::failed(action, status, &body));
        }
        serde_json::from_value(body).map_err(|e| engine(action, format!("unexpected answer: {e}")))
    }

    /// `POST /sandbox/{id}/start` or `/stop`, `DELETE /sandbox/{id}`.
    pub async fn lifecycle(&self, id: &str, what: &str) -> Result<()> {
        let action = format!("{what} sandbox {id}");
        let (method, url) = match what {
            "delete" => (
                reqwest::Method::DELETE,
                format!("{}/sandbox/{id}", self.base),
            ),
            _ => (
                reqwest::Method::POST,
                format!("{}/sandbox/{id}/{what}", self.base),
            ),
        };
        let (status, body) = self.call(method, &url, None, &action).await?;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(Self::failed(&action, status, &body))
        }
    }

    /// Polls until the sandbox is started; `error`, `build_failed` and `destroyed` are final.
    pub async fn wait_started(&self, id: &str, limit: Duration) -> Result<Sandbox> {
        let start = Instant::now();
        let action = format!("wait for sandbox {id} to start");
        loop {
            let sb = self
                .find(id)
                .await?
                .ok_or_else(|| engine(&action, "it no longer exists".into()))?;
            match sb.state.as_str() {
                "started" => return Ok(sb),
                "error" | "build_failed" | "destroyed" | "destroying" => {
                    return Err(engine(
                        &action,
                        format!(
                            "state {}: {}",
                            sb.state,
                            sb.error_reason.unwrap_or_default()
                        ),
                    ));
                }
                _ if start.elapsed() > limit => {
                    return Err(engine(
                        &action,
                        format!("still {} after {} s", sb.state, limit.as_secs()),
                    ));
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// The sandbox's toolbox base URL.
    pub async fn toolbox(&self, sb: &Sandbox) -> Result<String> {
        let proxy = match &sb.toolbox_proxy_url {
            Some(u) if !u.is_empty() => u.clone(),
            _ => {
                let action = "find the toolbox proxy";
                let (status, body) = self
                    .call(
                        reqwest::Method::GET,
                        &format!("{}/sandbox/{}/toolbox-proxy-url", self.base, sb.id),
                        None,
                        action,
                    )
                    .await?;
                if !(200..300).contains(&status) {
                    return Err(Self::failed(action, status, &body));
                }
                body.get("url")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            }
        };
        crate::modal::credentials::check_url(&proxy).map_err(|_| ExecError::InvalidConfig {
            backend: BackendKind::Daytona,
            reason: format!(
                "the toolbox proxy {proxy} is not https:// (plaintext only on loopback)"
            ),
        })?;
        Ok(format!("{}/{}", proxy.trim_end_matches('/'), sb.id))
    }

    /// Creates a session in the sandbox's toolbox.
    pub async fn create_session(&self, toolbox: &str, session: &str) -> Result<()> {
        let action = "create a process session";
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                &format!("{toolbox}/process/session"),
                Some(json!({ "sessionId": session })),
                action,
            )
            .await?;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(Self::failed(action, status, &body))
        }
    }

    /// Runs `command` in the session and waits for it.
    pub async fn session_exec(
        &self,
        toolbox: &str,
        session: &str,
        command: &str,
    ) -> Result<SessionExec> {
        let action = "execute in the process session";
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                &format!("{toolbox}/process/session/{session}/exec"),
                Some(json!({ "command": command, "runAsync": false, "async": false })),
                action,
            )
            .await?;
        if !(200..300).contains(&status) {
            return Err(Self::failed(action, status, &body));
        }
        serde_json::from_value(body).map_err(|e| engine(action, format!("unexpected answer: {e}")))
    }

    /// Deletes the session (best effort).
    pub async fn delete_session(&self, toolbox: &str, session: &str) {
        let _ = self
            .call(
                reqwest::Method::DELETE,
                &format!("{toolbox}/process/session/{session}"),
                None,
                "delete the process session",
            )
            .await;
    }
}
