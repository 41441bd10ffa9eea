//! The SIF cache: an image reference (`docker://...`, `library://...`) is built into a SIF file
//! once and reused, within a size cap, least recently used first out.
//!
//! The index (`index.json`) records for each reference its file, size and last use. The files
//! are the truth: a cluster's scratch purge deletes files without telling anyone, so every
//! lookup checks that the file is still there, drops entries whose file vanished, and builds
//! again. Builds and index updates hold an exclusive lock on the cache directory, so two
//! processes never build the same image at once or lose each other's entries.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::error::{ExecError, Result};

/// One cached image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The SIF file's name inside the cache directory.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Last use, Unix milliseconds.
    pub last_used_ms: u64,
}

/// What a lookup did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The image was cached and its file was there.
    Hit,
    /// The image was built now. `was_purged`: the index knew it but its file had been
    /// deleted behind the cache's back.
    Built {
        /// The file had vanished.
        was_purged: bool,
    },
}

/// A SIF cache in one directory.
#[derive(Debug, Clone)]
pub struct SifCache {
    dir: PathBuf,
    max_bytes: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn file_name_for(reference: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in reference.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let readable: String = reference
        .rsplit('/')
        .next()
        .unwrap_or("image")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{readable}-{h:016x}.sif")
}

/// Holds the cache's lock while alive.
struct Locked {
    _file: std::fs::File,
}

impl SifCache {
    /// A cache in `dir` (created when missing) holding at most `max_bytes`.
    pub fn new(dir: PathBuf, max_bytes: u64) -> SifCache {
        SifCache { dir, max_bytes }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> Result<Locked> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| ExecError::io(format!("creating {}", self.dir.display()), e))?;
        let path = self.dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| ExecError::io(format!("opening {}", path.display()), e))?;
        // SAFETY: flock(2) on a descriptor we own; released when the file is dropped.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        Ok(Locked { _file: file })
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join("index.json")
    }

    /// The index, with entries whose file is gone removed (their references returned).
    pub fn load(&self) -> (BTreeMap<String, Entry>, Vec<String>) {
        let mut index: BTreeMap<String, Entry> = std::fs::read_to_string(self.index_path())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let vanished: Vec<String> = index
            .iter()
            .filter(|(_, e)| !self.dir.join(&e.file).is_file())
            .map(|(r, _)| r.clone())
            .collect();
        for r in &vanished {
            index.remove(r);
        }
        (index, vanished)
    }

    fn save(&self, index: &BTreeMap<String, Entry>) -> Result<()> {
        let tmp = self.dir.join(".index.json.tmp");
        let text = serde_json::to_string_pretty(index).expect("index serializes");
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, self.index_path()))
            .map_err(|e| ExecError::io(format!("writing {}", self.index_path().display()), e))
    }

    /// Removes least recently used entries (never `keep`) until the total fits the cap.
    fn evict(&self, index: &mut BTreeMap<String, Entry>, keep: &str) -> Vec<String> {
        let mut evicted = Vec::new();
        loop {
            let total: u64 = index.values().map(|e| e.size).sum();
            if total <= self.max_bytes {
                return evicted;
            }
            let Some(victim) = index
                .iter()
                .filter(|(r, _)| r.as_str() != keep)
                .min_by_key(|(_, e)| e.last_used_ms)
                .map(|(r, _)| r.clone())
            else {
                return evicted;
            };
            if let Some(e) = index.remove(&victim) {
                let _ = std::fs::remove_file(self.dir.join(e.file));
            }
            evicted.push(victim);
        }
    }

    /// The SIF file for `reference`, built with `executable build` when it is not cached (or
    /// its file was purged). Build scratch goes to `scratch`.
    pub async fn get_or_build(
        &self,
        executable: &Path,
        reference: &str,
        scratch: &Path,
        timeout: Duration,
    ) -> Result<(PathBuf, Lookup)> {
        let _lock = self.lock()?;
        let (mut index, vanished) = self.load();
        if let Some(entry) = index.get_mut(reference) {
            entry.last_used_ms = now_ms();
            let path = self.dir.join(&entry.file);
            self.save(&index)?;
            return Ok((path, Lookup::Hit));
        }
        let was_purged = vanished.iter().any(|r| r == reference);
        let file = file_name_for(reference);
        let final_path = self.dir.join(&file);
        let tmp_path = self.dir.join(format!(".{file}.building"));
        let _ = std::fs::remove_file(&tmp_path);
        let tmp_dir = scratch.join("tmp");
        let cache_dir = scratch.join("cache");
        let _ = std::fs::create_dir_all(&tmp_dir);
        let _ = std::fs::create_dir_all(&cache_dir);
        let build = tokio::process::Command::new(executable)
            .arg("build")
            .arg(&tmp_path)
            .arg(reference)
            .env("APPTAINER_TMPDIR", &tmp_dir)
            .env("APPTAINER_CACHEDIR", &cache_dir)
            .env("SINGULARITY_TMPDIR", &tmp_dir)
            .env("SINGULARITY_CACHEDIR", &cache_dir)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(timeout, build)
            .await
            .map_err(|_| ExecError::Engine {
                backend: BackendKind::Apptainer,
                action: format!("build {reference}"),
                message: format!("no result after {} s", timeout.as_secs()),
            })?
            .map_err(|e| ExecError::io(format!("running {}", executable.display()), e))?;
        if !out.status.success() || !tmp_path.is_file() {
            let _ = std::fs::remove_file(&tmp_path);
            return Err(ExecError::ImageNotFound {
                backend: BackendKind::Apptainer,
                image: reference.to_string(),
                engine: format!(
                    "{} build: {}",
                    executable.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        std::fs::rename(&tmp_path, &final_path).map_err(|e| {
            ExecError::io(
                format!("moving the built image to {}", final_path.display()),
                e,
            )
        })?;
        let size = std::fs::metadata(&final_path).map(|m| m.len()).unwrap_or(0);
        index.insert(
            reference.to_string(),
            Entry {
                file,
                size,
                last_used_ms: now_ms(),
            },
        );
        self.evict(&mut index, reference);
        self.save(&index)?;
        Ok((final_path, Lookup::Built { was_purged }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(file: &str, size: u64, used: u64) -> Entry {
        Entry {
            file: file.into(),
            size,
            last_used_ms: used,
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_used_and_spares_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SifCache::new(dir.path().to_path_buf(), 250);
        let mut index = BTreeMap::new();
        for (r, used) in [("a", 3), ("b", 1), ("c", 2)] {
            std::fs::write(dir.path().join(r), [0u8; 100]).unwrap();
            index.insert(r.to_string(), entry(r, 100, used));
        }
        let evicted = cache.evict(&mut index, "b");
        assert_eq!(evicted, vec!["c".to_string()]);
        assert!(!dir.path().join("c").exists());
        assert!(index.contains_key("a") && index.contains_key("b"));
    }

    #[test]
    fn entries_whose_file_was_purged_are_dropped_on_load() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SifCache::new(dir.path().to_path_buf(), 1 << 30);
        std::fs::write(dir.path().join("kept.sif"), b"x").unwrap();
        let mut index = BTreeMap::new();
        index.insert("docker://kept".to_string(), entry("kept.sif", 1, 1));
        index.insert("docker://gone".to_string(), entry("gone.sif", 1, 1));
        cache.save(&index).unwrap();
        let (loaded, vanished) = cache.load();
        assert_eq!(vanished, vec!["docker://gone".to_string()]);
        assert!(loaded.contains_key("docker://kept"));
    }

    #[test]
    fn file_names_are_readable_and_distinct() {
        let a = file_name_for("docker://python:3.12-slim");
        let b = file_name_for("docker://python:3.11-slim");
        assert!(
            a.starts_with("python_3.12-slim-") && a.ends_with(".sif"),
            "{a}"
        );
        assert_ne!(a, b);
    }
}
