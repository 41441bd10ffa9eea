//! The "always" approvals: a small JSON file of approval keys, mode 0600, under nestbox's data
//! directory (`$XDG_DATA_HOME/nestbox/approvals.json`, else
//! `~/.local/share/nestbox/approvals.json`).
//!
//! ```json
//! {"version": 1, "approvals": [
//!   {"key": "git.force_push git push --force origin feature",
//!    "command": "git push --force origin feature", "added_at": 1764500000}
//! ]}
//! ```
//!
//! The file is read afresh on every check and merged on every write (under an exclusive
//! lock), so deleting a line by hand revokes it at once. A file that other users may write,
//! or that belongs to someone else, is not trusted: it could approve anything. Reading errors
//! count as "nothing stored": a broken store asks again, it never approves.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{ExecError, Result};
use crate::guard::ApprovalKey;

/// One stored approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredApproval {
    /// The approval key: a guard rule id and the normalized command words it covers.
    pub key: String,
    /// The command as it was written when the person chose "always" (for people reading the
    /// file; matching uses `key` only).
    #[serde(default)]
    pub command: String,
    /// When it was added, seconds since the Unix epoch.
    #[serde(default)]
    pub added_at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FileFormat {
    version: u32,
    #[serde(default)]
    approvals: Vec<StoredApproval>,
}

/// The persistent set of "always" approvals.
#[derive(Debug, Clone)]
pub struct ApprovalStore {
    path: PathBuf,
}

impl ApprovalStore {
    /// A store kept in `path` (created on the first "always").
    pub fn at(path: impl Into<PathBuf>) -> Self {
        ApprovalStore { path: path.into() }
    }

    /// Where the store lives by default: `$XDG_DATA_HOME/nestbox/approvals.json`, else
    /// `~/.local/share/nestbox/approvals.json`; `None` when neither variable is set.
    pub fn default_path() -> Option<PathBuf> {
        if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(d).join("nestbox/approvals.json"));
        }
        std::env::var_os("HOME")
            .filter(|d| !d.is_empty())
            .map(|h| PathBuf::from(h).join(".local/share/nestbox/approvals.json"))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every stored approval. A missing file is an empty store; an untrusted or unreadable
    /// one is an error (callers treat it as empty, and say so).
    pub fn list(&self) -> Result<Vec<StoredApproval>> {
        match File::open(&self.path) {
            Ok(mut f) => Ok(self.read_locked(&mut f)?.approvals),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(ExecError::io(format!("reading {}", self.path.display()), e)),
        }
    }

    /// True when `key` is stored.
    pub fn contains(&self, key: &ApprovalKey) -> Result<bool> {
        Ok(self.list()?.iter().any(|a| a.key == key.as_str()))
    }

    /// Adds `keys` (those not stored yet), merging with what is on disk.
    pub fn add(&self, keys: &[ApprovalKey], command: &str) -> Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.update(|approvals| {
            for k in keys {
                if !approvals.iter().any(|a| a.key == k.as_str()) {
                    approvals.push(StoredApproval {
                        key: k.as_str().to_owned(),
                        command: command.to_owned(),
                        added_at: now,
                    });
                }
            }
        })
    }

    /// Removes `key`; returns whether it was there.
    pub fn remove(&self, key: &str) -> Result<bool> {
        let mut found = false;
        self.update(|approvals| {
            let before = approvals.len();
            approvals.retain(|a| a.key != key);
            found = approvals.len() != before;
        })?;
        Ok(found)
    }

    fn update(&self, change: impl FnOnce(&mut Vec<StoredApproval>)) -> Result<()> {
        let io = |what: &str, e| ExecError::io(format!("{what} {}", self.path.display()), e);
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
        }
        // Another writer may rename a new file over the one we locked while we waited for the
        // lock: then our file is stale, so open the path again.
        let (_lock, mut data) = loop {
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(&self.path)
                .map_err(|e| io("opening", e))?;
            let data = self.read_locked(&mut f)?;
            let locked = f.metadata().map_err(|e| io("reading", e))?;
            let current = std::fs::symlink_metadata(&self.path).map_err(|e| io("reading", e))?;
            if (locked.dev(), locked.ino()) == (current.dev(), current.ino()) {
                break (f, data);
            }
        };
        change(&mut data.approvals);
        data.version = 1;
        let text = serde_json::to_string_pretty(&data).expect("approvals serialize");
        // Written next to the file and renamed over it, so a crash never leaves half a file;
        // the lock on the old file still keeps other writers out until we are done.
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut t = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io("creating a temporary file next to", e))?;
        let written = t
            .write_all(text.as_bytes())
            .and_then(|_| t.write_all(b"\n"))
            .and_then(|_| t.sync_all())
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("writing", e));
        }
        Ok(())
    }

    /// Locks the file exclusively, checks it is ours and private, and parses it.
    fn read_locked(&self, f: &mut File) -> Result<FileFormat> {
        // SAFETY: flock on a file descriptor we own; the lock ends when it closes.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(ExecError::io(
                format!("locking {}", self.path.display()),
                std::io::Error::last_os_error(),
            ));
        }
        let meta = f
            .metadata()
            .map_err(|e| ExecError::io(format!("reading {}", self.path.display()), e))?;
        // SAFETY: trivial getter.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me || meta.permissions().mode() & 0o022 != 0 {
            return Err(ExecError::InvalidRequest(format!(
                "not trusting the approvals file {}: it must belong to uid {me} and be writable by nobody else (chmod 600)",
                self.path.display()
            )));
        }
        let mut text = String::new();
        f.read_to_string(&mut text)
            .map_err(|e| ExecError::io(format!("reading {}", self.path.display()), e))?;
        if text.trim().is_empty() {
            return Ok(FileFormat::default());
        }
        serde_json::from_str(&text).map_err(|e| {
            ExecError::InvalidRequest(format!(
                "the approvals file {} is not valid: {e}",
                self.path.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::classify;

    fn keys(cmd: &str) -> Vec<ApprovalKey> {
        classify(cmd).approval_keys().expect("approvable")
    }

    #[test]
    fn an_always_approval_is_stored_with_mode_0600_and_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = ApprovalStore::at(dir.path().join("sub/approvals.json"));
        let k = keys("git push --force origin feature");
        store.add(&k, "git push --force origin feature").unwrap();
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(store.contains(&k[0]).unwrap());
        assert!(
            !store
                .contains(&keys("git push --force origin main")[0])
                .unwrap()
        );
    }

    #[test]
    fn adding_twice_keeps_one_entry_and_removing_revokes() {
        let dir = tempfile::tempdir().unwrap();
        let store = ApprovalStore::at(dir.path().join("a.json"));
        let k = keys("chmod -R 777 ./shared");
        store.add(&k, "x").unwrap();
        store.add(&k, "x").unwrap();
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.remove(k[0].as_str()).unwrap());
        assert!(!store.contains(&k[0]).unwrap());
        assert!(!store.remove(k[0].as_str()).unwrap());
    }

    #[test]
    fn a_missing_file_is_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = ApprovalStore::at(dir.path().join("none.json"));
        assert!(store.list().unwrap().is_empty());
    }

    #[test]
    fn a_file_others_can_write_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let store = ApprovalStore::at(dir.path().join("a.json"));
        store.add(&keys("git reset --hard"), "x").unwrap();
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = store.list().unwrap_err().to_string();
        assert!(err.contains("not trusting"), "{err}");
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_an_approval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        std::fs::write(&path, "{not json").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(ApprovalStore::at(&path).list().is_err());
    }
}
