//! Cells registered by launchers over the control socket, by token.
//!
//! A launcher (`nestbox run --gateway`) registers the cell it is about to start and receives a
//! random 256-bit token. The token lives in the relay's environment only; the relay sends it as
//! `Proxy-Authorization: Basic base64("cell:" + token)` on each `CONNECT`. The registration lasts
//! as long as the launcher's control connection: when the step ends (or the launcher dies), the
//! connection closes and the token stops working.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::Serialize;

use super::identity::CallerId;

/// One registered cell.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// The cell's name, matched by `cell = "..."` in rules and credentials.
    pub name: String,
    /// The step id (audit lines carry it).
    pub id: String,
    /// The credentials the launcher asked for (`--credential`); no other is resolved for it.
    pub credentials: Vec<String>,
    /// When it was registered (RFC 3339).
    pub since: String,
}

/// The registered cells.
#[derive(Debug, Default)]
pub struct Cells {
    by_token: Mutex<HashMap<String, Cell>>,
}

impl Cells {
    /// Registers `cell`; returns its new token.
    pub fn register(&self, mut cell: Cell) -> String {
        let token = super::random_hex(32);
        cell.since = crate::audit::rfc3339(SystemTime::now());
        if let Ok(mut m) = self.by_token.lock() {
            m.insert(token.clone(), cell);
        }
        token
    }

    /// Sets the step id of the cell holding `token`.
    pub fn set_step(&self, token: &str, step: &str) {
        if let Ok(mut m) = self.by_token.lock()
            && let Some(c) = m.get_mut(token)
        {
            c.id = step.to_string();
        }
    }

    /// Forgets the cell holding `token`.
    pub fn unregister(&self, token: &str) {
        if let Ok(mut m) = self.by_token.lock() {
            m.remove(token);
        }
    }

    /// The caller a token stands for.
    pub fn caller(&self, token: &str) -> Option<CallerId> {
        let m = self.by_token.lock().ok()?;
        m.get(token).map(|c| CallerId::Cell {
            name: c.name.clone(),
            id: c.id.clone(),
            credentials: c.credentials.clone(),
        })
    }

    /// The registered cells (without their tokens), for `nestbox gateway status`.
    pub fn list(&self) -> Vec<Cell> {
        self.by_token
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// The token in a `Proxy-Authorization` value: `Basic base64("cell:" + token)`.
pub fn token_from_header(value: &str) -> Option<String> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = crate::base64::decode(rest.trim().as_bytes())?;
    let text = String::from_utf8(decoded).ok()?;
    let token = text.strip_prefix("cell:")?;
    (!token.is_empty()).then(|| token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_and_go_with_registrations() {
        let cells = Cells::default();
        let t = cells.register(Cell {
            name: "worker".into(),
            id: "s1".into(),
            credentials: vec!["K".into()],
            since: String::new(),
        });
        assert_eq!(t.len(), 64);
        assert!(matches!(cells.caller(&t), Some(CallerId::Cell { name, .. }) if name == "worker"));
        assert!(cells.caller("forged").is_none());
        cells.unregister(&t);
        assert!(cells.caller(&t).is_none());
    }

    #[test]
    fn tokens_are_read_from_basic_credentials() {
        let v = format!("Basic {}", crate::base64::encode(b"cell:abc"));
        assert_eq!(token_from_header(&v).as_deref(), Some("abc"));
        let v = format!("Basic {}", crate::base64::encode(b"user:abc"));
        assert_eq!(token_from_header(&v), None);
        assert_eq!(token_from_header("Bearer abc"), None);
        assert_eq!(token_from_header("Basic !!!"), None);
    }
}
