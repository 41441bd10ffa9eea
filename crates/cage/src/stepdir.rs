//! The step's private directory: `HOME` and `TMPDIR` point inside it, it is writable only by
//! the step's user, and it is removed when the step ends unless `--keep-tmp` was given.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, chown};
use std::path::{Path, PathBuf};

use crate::error::{CageError, setup};

/// A fresh random step id (16 hex digits) from the kernel's random source.
pub fn new_step_id() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most len bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // getrandom cannot fail for 8 bytes once the pool is initialised; fall back on time+pid.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        bytes = (t ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The private directory of one step.
#[derive(Debug)]
pub struct StepDir {
    id: String,
    root: PathBuf,
    keep: bool,
}

impl StepDir {
    /// Creates `<TMPDIR or /tmp>/nestbox-<id>/{home,tmp}`, mode 0700, owned by the step's user.
    pub fn create(
        caller_env: &[(OsString, OsString)],
        keep: bool,
        user: Option<(u32, u32)>,
        id: Option<String>,
    ) -> Result<StepDir, CageError> {
        let base = caller_env
            .iter()
            .find(|(k, _)| k == "TMPDIR")
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| p.is_absolute() && p.is_dir())
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let id = match id {
            Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()) => id,
            _ => new_step_id(),
        };
        let root = base.join(format!("nestbox-{id}"));
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(0o700);
        builder.create(&root).map_err(|e| {
            setup(
                &format!("creating the step directory {}", root.display()),
                e,
            )
        })?;
        let dir = StepDir { id, root, keep };
        for sub in ["home", "tmp"] {
            builder
                .create(dir.root.join(sub))
                .map_err(|e| setup("creating the step's home and temp dirs", e))?;
        }
        if let Some((uid, gid)) = user {
            for p in [dir.root.clone(), dir.home(), dir.tmp()] {
                chown(&p, Some(uid), Some(gid))
                    .map_err(|e| setup(&format!("handing {} to uid {uid}", p.display()), e))?;
            }
        }
        Ok(dir)
    }

    pub fn step_id(&self) -> &str {
        &self.id
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
}

impl Drop for StepDir {
    fn drop(&mut self) {
        if !self.keep {
            // Most steps leave home/ and tmp/ empty: three rmdirs, and only otherwise the full
            // walk (remove_dir_all does not follow symlinks the step may have planted).
            let quick = std::fs::remove_dir(self.home()).is_ok()
                && std::fs::remove_dir(self.tmp()).is_ok()
                && std::fs::remove_dir(&self.root).is_ok();
            if !quick {
                let _ = std::fs::remove_dir_all(&self.root);
            }
        }
    }
}
