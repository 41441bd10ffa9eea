//! Where the Modal backend's credentials come from, decided once, before anything connects.
//!
//! - **Direct** (the user's own token pair): `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` when
//!   both are set, which win; else the active profile of the config file (`config_path`,
//!   else `MODAL_CONFIG_PATH`, else `~/.modal.toml`): the profile named by the configuration
//!   or `MODAL_PROFILE`, else the one marked `active = true`, else `default`. Half a pair in
//!   the environment is an error, not a reason to look elsewhere.
//! - **Managed**: the process holds placeholders and talks to a credential gateway that swaps
//!   in the real pair (nestbox's gateway does this), so the agent never holds the secret.
//! - **Auto**: direct when the user's credentials exist, else managed when configured.
//!
//! An explicit mode never falls back to the other one. When nothing is usable, the error says
//! everything that was checked and how to fix it; token values never appear in an error.

use std::path::{Path, PathBuf};

use crate::backend::BackendKind;
use crate::config::{ModalConfig, ModalCredentials};
use crate::error::{ExecError, Result};

/// Modal's own default API server.
pub const DEFAULT_SERVER: &str = "https://api.modal.com";

/// Which kind of credentials were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The user's own token pair.
    Direct,
    /// Placeholders, through a credential gateway.
    Managed,
}

/// The credentials chosen, and where they came from.
#[derive(Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Direct or managed.
    pub mode: Mode,
    /// The token id (or its placeholder).
    pub token_id: String,
    /// The token secret (or its placeholder).
    pub token_secret: String,
    /// The API server (or the gateway's endpoint for it).
    pub server_url: String,
    /// The Modal environment, when one was named.
    pub environment: Option<String>,
    /// Where the pair came from, for people (never the values).
    pub source: String,
    /// A CA certificate to trust (a gateway that intercepts TLS).
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("mode", &self.mode)
            .field("server_url", &self.server_url)
            .field("environment", &self.environment)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The user's own credentials, if any, and what was checked on the way.
struct Direct {
    found: Option<Resolved>,
    checked: Vec<String>,
}

fn unavailable(reason: String, hint: &str) -> ExecError {
    ExecError::Unavailable {
        backend: BackendKind::Modal,
        reason,
        hint: Some(hint.into()),
    }
}

fn invalid(reason: String) -> ExecError {
    ExecError::InvalidConfig {
        backend: BackendKind::Modal,
        reason,
    }
}

fn nonempty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

fn config_file(config: &ModalConfig, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = &config.config_path {
        return Some(p.clone());
    }
    if let Some(p) = nonempty(env("MODAL_CONFIG_PATH")) {
        return Some(PathBuf::from(p));
    }
    nonempty(env("HOME")).map(|h| Path::new(&h).join(".modal.toml"))
}

fn direct(config: &ModalConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Direct> {
    let mut checked = Vec::new();
    let id = nonempty(env("MODAL_TOKEN_ID"));
    let secret = nonempty(env("MODAL_TOKEN_SECRET"));
    let file = config_file(config, env);
    // The file may still name the server and environment when the pair comes from the env.
    let (table, file_note) = match &file {
        None => (None, "no config file (HOME is not set)".to_string()),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => match toml::from_str::<toml::Table>(&text) {
                Ok(t) => (Some(t), String::new()),
                Err(e) => {
                    return Err(invalid(format!(
                        "{} is not valid TOML: {}",
                        path.display(),
                        e.message()
                    )));
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (None, format!("{}: not found", path.display()))
            }
            Err(e) => (None, format!("{}: unreadable ({e})", path.display())),
        },
    };
    let asked_profile = config
        .profile
        .clone()
        .or_else(|| nonempty(env("MODAL_PROFILE")));
    let profile = table.as_ref().and_then(|t| {
        let name = asked_profile.clone().or_else(|| {
            t.iter()
                .find(|(_, v)| v.get("active").and_then(|a| a.as_bool()) == Some(true))
                .map(|(k, _)| k.clone())
        })?;
        Some((
            name.clone(),
            t.get(&name).and_then(|v| v.as_table()).cloned(),
        ))
    });
    let profile = match (profile, table.as_ref()) {
        (Some(p), _) => Some(p),
        (None, Some(t)) => Some((
            "default".to_string(),
            t.get("default").and_then(|v| v.as_table()).cloned(),
        )),
        (None, None) => None,
    };
    if let (Some(name), Some((_, None)), Some(t)) = (&asked_profile, &profile, &table) {
        let names: Vec<&str> = t.keys().map(String::as_str).collect();
        return Err(invalid(format!(
            "the Modal profile `{name}` is not in {} (profiles there: {})",
            file.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        )));
    }
    let field = |key: &str| {
        profile
            .as_ref()
            .and_then(|(_, t)| t.as_ref())
            .and_then(|t| t.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .filter(|s| !s.is_empty())
    };
    let server_url = config
        .server_url
        .clone()
        .or_else(|| nonempty(env("MODAL_SERVER_URL")))
        .or_else(|| field("server_url"))
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let environment = config
        .environment
        .clone()
        .or_else(|| nonempty(env("MODAL_ENVIRONMENT")))
        .or_else(|| field("environment"));
    let make = |token_id: String, token_secret: String, source: String| Resolved {
        mode: Mode::Direct,
        token_id,
        token_secret,
        server_url: server_url.clone(),
        environment: environment.clone(),
        source,
        ca_file: None,
    };
    match (id, secret) {
        (Some(id), Some(secret)) => {
            return Ok(Direct {
                found: Some(make(
                    id,
                    secret,
                    "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET".into(),
                )),
                checked,
            });
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(invalid(
                "only one of MODAL_TOKEN_ID and MODAL_TOKEN_SECRET is set: set both, or unset both to use the profile in ~/.modal.toml".into(),
            ));
        }
        (None, None) => checked.push("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET: not set".into()),
    }
    match (&file, &profile) {
        (Some(path), Some((name, Some(_)))) => match (field("token_id"), field("token_secret")) {
            (Some(id), Some(secret)) => {
                return Ok(Direct {
                    found: Some(make(
                        id,
                        secret,
                        format!("profile `{name}` of {}", path.display()),
                    )),
                    checked,
                });
            }
            _ => checked.push(format!(
                "profile `{name}` of {}: no token_id and token_secret",
                path.display()
            )),
        },
        (Some(path), Some((name, None))) => checked.push(format!(
            "{}: no profile `{name}` and none marked active = true",
            path.display()
        )),
        _ => checked.push(file_note),
    }
    Ok(Direct {
        found: None,
        checked,
    })
}

const DIRECT_HINT: &str =
    "run `modal token new` (it writes ~/.modal.toml), or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET";

/// Chooses the credentials for `config`, reading the environment through `env`.
pub fn resolve(config: &ModalConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Resolved> {
    let managed = || {
        config.managed.as_ref().map(|m| Resolved {
            mode: Mode::Managed,
            token_id: m.token_id.clone(),
            token_secret: m.token_secret.clone(),
            server_url: m.server_url.clone(),
            environment: config
                .environment
                .clone()
                .or_else(|| nonempty(env("MODAL_ENVIRONMENT"))),
            source: format!("the credential gateway at {}", m.server_url),
            ca_file: m.ca_file.clone(),
        })
    };
    match config.credentials {
        ModalCredentials::Direct => {
            let d = direct(config, env)?;
            d.found.ok_or_else(|| {
                unavailable(
                    format!(
                        "credentials = \"direct\" and no Modal credentials were found (checked: {}); the credential gateway is never used in direct mode",
                        d.checked.join("; ")
                    ),
                    DIRECT_HINT,
                )
            })
        }
        ModalCredentials::Managed => managed().ok_or_else(|| {
            invalid(
                "credentials = \"managed\" needs [backend.managed] with the gateway's server_url (--modal-gateway URL); your own credentials are never used in managed mode".into(),
            )
        }),
        ModalCredentials::Auto => {
            let d = direct(config, env)?;
            if let Some(found) = d.found {
                return Ok(found);
            }
            managed().ok_or_else(|| {
                unavailable(
                    format!(
                        "no Modal credentials (checked: {}; managed: no [backend.managed] gateway configured)",
                        d.checked.join("; ")
                    ),
                    &format!("{DIRECT_HINT}; or configure a credential gateway with [backend.managed] server_url (--modal-gateway URL)"),
                )
            })
        }
    }
}

/// Checks a server URL: `https://`, or `http://` on a loopback address only (a test server).
pub fn check_url(url: &str) -> Result<()> {
    if url.starts_with("https://") {
        return Ok(());
    }
    if let Some(rest) = url.strip_prefix("http://") {
        let host = rest.split(['/', '?']).next().unwrap_or_default();
        let host = match host.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
            _ => host,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.to_canonical().is_loopback());
        if loopback {
            return Ok(());
        }
        return Err(invalid(format!(
            "{url}: plaintext http:// is only allowed on loopback (test servers); use https://"
        )));
    }
    Err(invalid(format!("{url} is not an https:// URL")))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::ModalManaged;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    fn with_file(text: &str) -> (tempfile::TempDir, ModalConfig) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("modal.toml");
        std::fs::write(&path, text).unwrap();
        let config = ModalConfig {
            config_path: Some(path),
            ..ModalConfig::default()
        };
        (dir, config)
    }

    fn gateway() -> ModalManaged {
        ModalManaged {
            server_url: "https://gw.example:8443".into(),
            token_id: "nestbox:resolve:env:MODAL_TOKEN_ID".into(),
            token_secret: "nestbox:resolve:env:MODAL_TOKEN_SECRET".into(),
            ca_file: None,
        }
    }

    #[test]
    fn the_environment_pair_wins_over_the_profile() {
        let (_d, c) = with_file("[default]\ntoken_id = \"ak-file\"\ntoken_secret = \"as-file\"\n");
        let env = env_of(&[
            ("MODAL_TOKEN_ID", "ak-env"),
            ("MODAL_TOKEN_SECRET", "as-env"),
        ]);
        let r = resolve(&c, &env).unwrap();
        assert_eq!((r.mode, r.token_id.as_str()), (Mode::Direct, "ak-env"));
    }

    #[test]
    fn the_active_profile_is_used_when_the_environment_has_no_pair() {
        let (_d, c) = with_file(
            "[default]\ntoken_id = \"ak-d\"\ntoken_secret = \"as-d\"\n[work]\nactive = true\ntoken_id = \"ak-w\"\ntoken_secret = \"as-w\"\nserver_url = \"https://modal.internal\"\n",
        );
        let r = resolve(&c, &env_of(&[])).unwrap();
        assert_eq!(r.token_id, "ak-w");
        assert_eq!(r.server_url, "https://modal.internal");
        assert!(r.source.contains("profile `work`"), "{}", r.source);
        let r = resolve(&c, &env_of(&[("MODAL_PROFILE", "default")])).unwrap();
        assert_eq!(r.token_id, "ak-d");
    }

    #[test]
    fn half_a_pair_in_the_environment_is_an_error_not_a_fallback() {
        let (_d, c) = with_file("[default]\ntoken_id = \"ak\"\ntoken_secret = \"as\"\n");
        let e = resolve(&c, &env_of(&[("MODAL_TOKEN_ID", "ak-env")])).unwrap_err();
        assert!(e.to_string().contains("only one of"), "{e}");
    }

    #[test]
    fn auto_prefers_direct_credentials_and_uses_the_gateway_only_without_them() {
        let (_d, mut c) = with_file("[default]\ntoken_id = \"ak\"\ntoken_secret = \"as\"\n");
        c.managed = Some(gateway());
        assert_eq!(resolve(&c, &env_of(&[])).unwrap().mode, Mode::Direct);
        c.config_path = Some("/nonexistent/modal.toml".into());
        let r = resolve(&c, &env_of(&[])).unwrap();
        assert_eq!(r.mode, Mode::Managed);
        assert!(r.token_secret.starts_with("nestbox:resolve:"));
    }

    #[test]
    fn explicit_modes_never_fall_back_to_each_other() {
        let (_d, mut c) = with_file("[default]\ntoken_id = \"ak\"\ntoken_secret = \"as\"\n");
        c.credentials = ModalCredentials::Managed;
        let e = resolve(&c, &env_of(&[])).unwrap_err();
        assert!(e.to_string().contains("never used in managed mode"), "{e}");
        c.credentials = ModalCredentials::Direct;
        c.managed = Some(gateway());
        c.config_path = Some("/nonexistent/modal.toml".into());
        let e = resolve(&c, &env_of(&[])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("gateway is never used in direct mode"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/modal.toml: not found"),
            "{text}"
        );
    }

    #[test]
    fn nothing_usable_lists_everything_that_was_checked() {
        let (_d, c) = with_file("[default]\nserver_url = \"https://x\"\n");
        let e = resolve(&c, &env_of(&[])).unwrap_err().to_string();
        assert!(
            e.contains("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET: not set"),
            "{e}"
        );
        assert!(e.contains("no token_id and token_secret"), "{e}");
        assert!(e.contains("no [backend.managed] gateway configured"), "{e}");
        assert!(e.contains("modal token new"), "{e}");
    }

    #[test]
    fn a_named_profile_that_does_not_exist_is_an_error() {
        let (_d, mut c) = with_file("[a]\ntoken_id = \"ak\"\ntoken_secret = \"as\"\n");
        c.profile = Some("b".into());
        let e = resolve(&c, &env_of(&[])).unwrap_err().to_string();
        assert!(
            e.contains("profile `b` is not in") && e.contains("profiles there: a"),
            "{e}"
        );
    }

    #[test]
    fn plaintext_urls_are_refused_unless_on_loopback() {
        assert!(check_url("https://api.modal.com").is_ok());
        assert!(check_url("http://127.0.0.1:9000").is_ok());
        assert!(check_url("http://[::1]:9000/x").is_ok());
        assert!(check_url("http://localhost:1").is_ok());
        assert!(check_url("http://api.modal.com").is_err());
        assert!(check_url("http://10.0.0.1:80").is_err());
        assert!(check_url("ftp://x").is_err());
    }
}
