//! The step's process tree, found through `/proc`.
//!
//! The launcher is a child subreaper, so every orphan of the step is reparented to it: walking
//! `/proc` from the launcher's pid down finds every process the step created, including those
//! that called `setsid` to leave its process group.

use std::collections::HashMap;

/// Reads `(pid, ppid)` of every process visible in `/proc`.
fn parents() -> HashMap<libc::pid_t, libc::pid_t> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some(ppid) = read_ppid(pid) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// The parent pid from `/proc/PID/stat`. The command name may hold spaces and parentheses, so
/// the fields are counted from the last `)`.
pub fn read_ppid(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `root` (not `root` itself), parents before children.
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let parents = parents();
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    for (&pid, &ppid) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                out.push(k);
                queue.push(k);
            }
        }
    }
    out
}

/// Sends `signal` to every descendant of the calling process.
pub fn signal_descendants(signal: libc::c_int) -> usize {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let all = descendants(me);
    for &pid in &all {
        // SAFETY: plain kill; a pid that already exited yields ESRCH, which is fine.
        unsafe { libc::kill(pid, signal) };
    }
    all.len()
}

/// Reaps every exited child without blocking; returns how many were reaped, and records the
/// status of `watched` if it was among them.
pub fn reap(watched: libc::pid_t, status_of_watched: &mut Option<libc::c_int>) -> usize {
    let mut n = 0;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return n;
        }
        n += 1;
        if pid == watched {
            *status_of_watched = Some(status);
        }
    }
}

/// Whether the calling process still has children (living or unreaped).
pub fn has_children() -> bool {
    // SAFETY: waitid with WNOHANG|WNOWAIT only peeks; info is a valid out pointer.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    r == 0
}

/// Kills every descendant with SIGKILL and reaps them until none is left. Processes that fork
/// while this runs are caught on the next pass: a killed process cannot fork again, and its
/// children come to the launcher (the subreaper). Returns how many processes were killed.
pub fn kill_all_descendants() -> usize {
    let mut killed = 0;
    let mut ignored = None;
    for _ in 0..1000 {
        killed += signal_descendants(libc::SIGKILL);
        reap(0, &mut ignored);
        if !has_children() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_of_self_is_the_real_parent() {
        // SAFETY: trivial getters.
        let (me, parent) = unsafe { (libc::getpid(), libc::getppid()) };
        assert_eq!(read_ppid(me), Some(parent));
    }
}
