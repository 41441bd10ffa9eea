//! Container leases: who may use a kept container, until when, and when the reaper may remove
//! it. Labels are fixed when a container is created, so the mutable part lives on this machine:
//! one lease file per container under `<state dir>/docker-leases/`, named after the container.
//!
//! - A backend that uses a container holds a **shared** `flock` on its lease file for as long
//!   as it is open, and writes the expiry (`now + idle_ttl`, longer while a job with a longer
//!   timeout runs) at every command. The kernel drops the lock when the process dies, so "the
//!   owner is gone" needs no PID guessing.
//! - The reaper takes an **exclusive**, non-blocking lock. It gets it only when nobody uses
//!   the container; it then re-reads the lease under that lock, and removes the container while
//!   still holding it. A process that wants to reuse a container must get the shared lock
//!   first, and then checks that the file it locked is still the one at the path (the reaper
//!   unlinks it) and that the container still runs. That closes the race where a reaper's
//!   `rm -f` removes a container a sibling has just picked up (Hermes Agent #115697).
//! - Containers carry a realm label (a hash of this lease directory, the host name and the
//!   user): a reaper only ever considers its own realm's containers, because only for those
//!   does it know where the leases are.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{ExecError, Result};

/// What a lease file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Unix seconds after which the container may be reaped (when nobody holds it).
    pub expires_at: u64,
    /// Kept for reuse (`true`) or private to one backend (`false`: reaped as soon as its
    /// owner is gone).
    pub reuse: bool,
}

/// A held lease: the open, shared-locked lease file of one container.
#[derive(Debug)]
pub struct Lease {
    file: File,
    path: PathBuf,
    record: LeaseRecord,
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn flock(file: &File, op: i32) -> bool {
    // SAFETY: flock(2) on a descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), op) == 0 }
}

/// A file kept beside a container's lease (removed with it), e.g. its computed exposure.
pub fn side_file(dir: &Path, name: &str, suffix: &str) -> PathBuf {
    dir.join(format!("{name}.{suffix}"))
}

fn remove_with_side_files(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(stem) = path.to_str().and_then(|p| p.strip_suffix(".lease")) {
        let _ = std::fs::remove_file(format!("{stem}.exposure.json"));
    }
}

/// The lease file of container `name` in `dir`.
pub fn lease_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.lease"))
}

fn open_lease_file(path: &Path, create: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

/// True when `file` is still the file at `path` (not unlinked or replaced since it was opened).
fn still_linked(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

fn read_record(file: &mut File) -> Option<LeaseRecord> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_record(file: &mut File, record: &LeaseRecord) -> std::io::Result<()> {
    // In place: replacing the file would leave the lock on the old inode.
    let text = serde_json::to_string(record).expect("lease record serializes");
    file.seek(SeekFrom::Start(0))?;
    file.set_len(0)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

impl Lease {
    /// Creates the lease of a container about to be created (before it exists, so a reaper
    /// that lists it sees it held).
    pub fn create(dir: &Path, name: &str, reuse: bool, ttl: Duration) -> Result<Lease> {
        std::fs::create_dir_all(dir)
            .map_err(|e| ExecError::io(format!("creating {}", dir.display()), e))?;
        let path = lease_path(dir, name);
        let mut file = open_lease_file(&path, true)
            .map_err(|e| ExecError::io(format!("creating {}", path.display()), e))?;
        if !flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
            return Err(ExecError::io(
                format!("locking the new lease {}", path.display()),
                std::io::Error::last_os_error(),
            ));
        }
        let record = LeaseRecord {
            expires_at: now_secs() + ttl.as_secs(),
            reuse,
        };
        write_record(&mut file, &record)
            .map_err(|e| ExecError::io(format!("writing {}", path.display()), e))?;
        Ok(Lease { file, path, record })
    }

    /// Takes a shared hold on the lease of an existing container, if nobody is reaping it and
    /// its lease file is still in place. `None`: pick another container or create one.
    pub fn join(dir: &Path, name: &str, ttl: Duration) -> Option<Lease> {
        let path = lease_path(dir, name);
        let mut file = open_lease_file(&path, false).ok()?;
        if !flock(&file, libc::LOCK_SH | libc::LOCK_NB) || !still_linked(&file, &path) {
            return None;
        }
        let mut record = read_record(&mut file)?;
        if !record.reuse {
            return None;
        }
        record.expires_at = record.expires_at.max(now_secs() + ttl.as_secs());
        write_record(&mut file, &record).ok()?;
        Some(Lease { file, path, record })
    }

    /// Pushes the expiry to at least `now + for_at_least`.
    pub fn renew(&mut self, for_at_least: Duration) -> Result<()> {
        let wanted = now_secs() + for_at_least.as_secs();
        if wanted <= self.record.expires_at {
            return Ok(());
        }
        self.record.expires_at = wanted;
        write_record(&mut self.file, &self.record)
            .map_err(|e| ExecError::io(format!("renewing {}", self.path.display()), e))
    }

    /// Deletes the lease file (the container is being removed by its owner).
    pub fn remove(self) {
        remove_with_side_files(&self.path);
    }
}

/// What the reaper decided about one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Someone holds it, or its lease runs: leave it.
    Keep,
    /// Nobody holds it and its lease has expired (or it was private, or it has no lease):
    /// remove it, unless it still runs jobs.
    Reap,
}

/// An exclusive hold taken by the reaper; dropping it releases the lock.
pub struct ReapHold {
    file: Option<File>,
    path: PathBuf,
}

impl ReapHold {
    /// Extends the lease (the container turned out to run jobs).
    pub fn extend(&mut self, by: Duration) {
        if let Some(file) = self.file.as_mut() {
            let record = LeaseRecord {
                expires_at: now_secs() + by.as_secs(),
                reuse: read_record(file).map(|r| r.reuse).unwrap_or(true),
            };
            let _ = write_record(file, &record);
        }
    }

    /// Deletes the lease file (after the container was removed), still under the lock.
    pub fn remove(self) {
        remove_with_side_files(&self.path);
    }
}

/// Judges the container `name`, created at `created` (Unix seconds): takes the exclusive lock
/// when it can, and says whether the container may go. A container whose lease file does not
/// exist is given a minute of grace (its creator may be between naming and locking it).
pub fn judge(dir: &Path, name: &str, created: u64, running: bool) -> (Verdict, Option<ReapHold>) {
    let path = lease_path(dir, name);
    let mut file = match open_lease_file(&path, false) {
        Ok(f) => f,
        Err(_) => {
            let young = now_secs().saturating_sub(created) < 60;
            let verdict = if young { Verdict::Keep } else { Verdict::Reap };
            return (verdict, Some(ReapHold { file: None, path }));
        }
    };
    if !flock(&file, libc::LOCK_EX | libc::LOCK_NB) || !still_linked(&file, &path) {
        return (Verdict::Keep, None);
    }
    let verdict = match read_record(&mut file) {
        _ if !running => Verdict::Reap,
        Some(r) if r.reuse && r.expires_at > now_secs() => Verdict::Keep,
        _ => Verdict::Reap,
    };
    (
        verdict,
        Some(ReapHold {
            file: Some(file),
            path,
        }),
    )
}

/// Lease files in `dir` whose container is not in `live`, and that nobody holds: removed.
pub fn remove_stale(dir: &Path, live: &[String]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(container) = name.strip_suffix(".lease") else {
            continue;
        };
        if live.iter().any(|l| l == container) {
            continue;
        }
        if let Ok(file) = open_lease_file(&entry.path(), false)
            && flock(&file, libc::LOCK_EX | libc::LOCK_NB)
        {
            remove_with_side_files(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lease_is_never_reaped_and_an_expired_free_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Lease::create(dir.path(), "c1", true, Duration::from_secs(0)).unwrap();
        let (v, hold) = judge(dir.path(), "c1", 0, true);
        assert_eq!(v, Verdict::Keep);
        assert!(
            hold.is_none(),
            "the holder's shared lock keeps the reaper out"
        );
        drop(lease);
        let (v, hold) = judge(dir.path(), "c1", 0, true);
        assert_eq!(v, Verdict::Reap);
        assert!(hold.is_some());
    }

    #[test]
    fn a_joiner_is_refused_while_the_reaper_holds_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        drop(Lease::create(dir.path(), "c2", true, Duration::from_secs(0)).unwrap());
        let (_, hold) = judge(dir.path(), "c2", 0, true);
        assert!(Lease::join(dir.path(), "c2", Duration::from_secs(60)).is_none());
        hold.unwrap().remove();
        assert!(Lease::join(dir.path(), "c2", Duration::from_secs(60)).is_none());
    }

    #[test]
    fn an_unexpired_reusable_lease_is_kept_and_can_be_joined() {
        let dir = tempfile::tempdir().unwrap();
        drop(Lease::create(dir.path(), "c3", true, Duration::from_secs(300)).unwrap());
        let (v, hold) = judge(dir.path(), "c3", 0, true);
        assert_eq!(v, Verdict::Keep);
        drop(hold);
        assert!(Lease::join(dir.path(), "c3", Duration::from_secs(60)).is_some());
    }

    #[test]
    fn a_private_lease_whose_owner_is_gone_is_reaped_before_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        drop(Lease::create(dir.path(), "c4", false, Duration::from_secs(3600)).unwrap());
        assert_eq!(judge(dir.path(), "c4", 0, true).0, Verdict::Reap);
        assert!(Lease::join(dir.path(), "c4", Duration::from_secs(60)).is_none());
    }

    #[test]
    fn a_container_without_a_lease_gets_a_minute_of_grace() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(judge(dir.path(), "new", now_secs(), true).0, Verdict::Keep);
        assert_eq!(
            judge(dir.path(), "old", now_secs() - 120, true).0,
            Verdict::Reap
        );
    }
}
