//! Secrets: read from the gateway's environment or from a file only its user can read, held in
//! a type that never prints its value.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::MetadataExt;

use nestbox_policy::gateway::{CredentialSpec, SecretSource};

/// A secret value. `Debug` and `Display` print `***`; the bytes are reachable only through
/// [`Secret::expose`], at the one place that writes them towards the server.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// The bytes, for the request that goes upstream.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // Best effort: do not leave the value in freed memory.
        for b in self.0.iter_mut() {
            // SAFETY: a volatile write to a byte we own, so the compiler keeps it.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// Why a credential's secret could not be read. Never holds the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: credential `{name}`: {reason}")]
pub struct SecretError {
    /// The credential.
    pub name: String,
    /// Where it is defined.
    pub origin: String,
    /// What is wrong, and how to fix it.
    pub reason: String,
}

/// Checks a value: not empty, no CR, LF or NUL (they would split or end a header).
pub fn check_value(value: &[u8]) -> Result<(), String> {
    if value.is_empty() {
        return Err("the secret is empty".into());
    }
    if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(
            "the secret contains a CR, LF or NUL byte, which could end or split the header it \
             goes into; it is refused"
                .into(),
        );
    }
    Ok(())
}

/// Reads the secret of `spec` from `env` (the gateway's environment) or its file.
pub fn load(
    spec: &CredentialSpec,
    env: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<Secret, SecretError> {
    let fail = |reason: String| SecretError {
        name: spec.name.clone(),
        origin: spec.origin.to_string(),
        reason,
    };
    let value = match &spec.source {
        SecretSource::Env(var) => env(var).ok_or_else(|| {
            fail(format!(
                "the gateway's environment has no {var}: start the gateway with {var} set"
            ))
        })?,
        SecretSource::File(path) => {
            let mut file = std::fs::File::open(path)
                .map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
            let meta = file
                .metadata()
                .map_err(|e| fail(format!("cannot stat {}: {e}", path.display())))?;
            // SAFETY: geteuid has no failure mode.
            let me = unsafe { libc::geteuid() };
            if meta.mode() & 0o077 != 0 {
                return Err(fail(format!(
                    "{} is readable or writable by others (mode {:o}); a secret file must be \
                     readable only by the gateway's user: chmod 600 {}",
                    path.display(),
                    meta.mode() & 0o777,
                    path.display()
                )));
            }
            if meta.uid() != me && me != 0 {
                return Err(fail(format!(
                    "{} belongs to uid {}, not to the gateway's user (uid {me})",
                    path.display(),
                    meta.uid()
                )));
            }
            if !meta.is_file() {
                return Err(fail(format!("{} is not a regular file", path.display())));
            }
            let mut value = Vec::new();
            file.by_ref()
                .take(64 * 1024 + 1)
                .read_to_end(&mut value)
                .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
            if value.len() > 64 * 1024 {
                return Err(fail(format!("{} is larger than 64 KiB", path.display())));
            }
            // one trailing newline is how files end, not part of the secret
            if value.ends_with(b"\n") {
                value.pop();
                if value.ends_with(b"\r") {
                    value.pop();
                }
            }
            value
        }
    };
    check_value(&value).map_err(|r| fail(format!("{} ({})", r, spec.source)))?;
    Ok(Secret(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn spec(source: SecretSource) -> CredentialSpec {
        CredentialSpec {
            name: "K".into(),
            origin: nestbox_policy::Origin::Flag("test"),
            source,
            endpoints: vec![],
            callers: vec![],
        }
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret(b"hunter2".to_vec());
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
    }

    #[test]
    fn files_must_be_private_and_values_clean() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "hunter2\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load(&spec(SecretSource::File(path.clone())), &|_| None).unwrap_err();
        assert!(e.reason.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = load(&spec(SecretSource::File(path.clone())), &|_| None).unwrap();
        assert_eq!(s.expose(), b"hunter2");
        std::fs::write(&path, "hun\nter2\n").unwrap();
        let e = load(&spec(SecretSource::File(path)), &|_| None).unwrap_err();
        assert!(e.reason.contains("CR, LF or NUL"), "{e}");
        assert!(!e.to_string().contains("hun"), "{e}");
    }

    #[test]
    fn environment_values_are_checked_too() {
        let e = load(&spec(SecretSource::Env("V".into())), &|_| None).unwrap_err();
        assert!(e.reason.contains("has no V"), "{e}");
        let e = load(&spec(SecretSource::Env("V".into())), &|_| {
            Some(b"a\rb".to_vec())
        })
        .unwrap_err();
        assert!(e.reason.contains("CR, LF"), "{e}");
        let s = load(&spec(SecretSource::Env("V".into())), &|_| {
            Some(b"ok".to_vec())
        })
        .unwrap();
        assert_eq!(s.expose(), b"ok");
    }
}
