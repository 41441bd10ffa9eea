//! A pids cgroup for the step, used when the step runs as root.
//!
//! RLIMIT_NPROC does not bind root (the kernel exempts the initial user namespace's root from
//! it), so for a root step the process limit is enforced with a pids cgroup when nestbox can
//! create one (cgroup v1 `pids` hierarchy, or cgroup v2 with `pids` delegated to our cgroup).
//! The cgroup also lists every process of the step, wherever it was reparented.

use std::io;
use std::path::{Path, PathBuf};

/// A child cgroup of ours with `pids.max` set; removed (after killing what is left) on drop.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
}

/// Where the pids controller is mounted and our cgroup's path within it.
fn locate() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    // Fast path: the usual cgroup v1 layout, without parsing mountinfo.
    if let Some(path) = cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers.split(',').any(|c| c == "pids").then_some(path)
    }) {
        let dir = Path::new("/sys/fs/cgroup/pids").join(path.trim_start_matches('/'));
        if dir.join("cgroup.procs").exists() {
            return Ok(dir);
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;

    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).unwrap_or("");
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let options = r.nth(1).unwrap_or("");
        let v1_pids = fstype == "cgroup" && options.split(',').any(|o| o == "pids");
        let v2 = fstype == "cgroup2";
        if !(v1_pids || v2) {
            continue;
        }
        let ours = cgroups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let matches = if v1_pids {
                controllers.split(',').any(|c| c == "pids")
            } else {
                controllers.is_empty()
            };
            matches.then(|| path.to_string())
        });
        let Some(ours) = ours else { continue };
        let dir = Path::new(mount_point).join(ours.trim_start_matches('/'));
        if v2 {
            let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                .map(|s| s.split_whitespace().any(|c| c == "pids"))
                .unwrap_or(false);
            if !delegated {
                continue;
            }
        }
        return Ok(dir);
    }
    Err("no pids cgroup controller is mounted and delegated to this process".into())
}

impl PidsCgroup {
    /// Creates `nestbox-<step id>` under our own pids cgroup, limited to `max` processes.
    pub fn create(step_id: &str, max: u64) -> Result<PidsCgroup, String> {
        let parent = locate()?;
        let dir = parent.join(format!("nestbox-{step_id}"));
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
        let cg = PidsCgroup { dir };
        std::fs::write(cg.dir.join("pids.max"), max.to_string())
            .map_err(|e| format!("cannot set pids.max in {}: {e}", cg.dir.display()))?;
        Ok(cg)
    }

    /// Moves `pid` into the cgroup (its future children follow).
    pub fn add(&self, pid: libc::pid_t) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// The processes in the cgroup now.
    pub fn pids(&self) -> Vec<libc::pid_t> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills every process in the cgroup; returns how many signals were sent.
    pub fn kill_all(&self) -> usize {
        let mut sent = 0;
        for _ in 0..100 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: plain kill.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                sent += 1;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        sent
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        self.kill_all();
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            // Killed processes leave the cgroup once reaped.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
