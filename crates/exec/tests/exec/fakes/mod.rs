//! Local fakes of services that cannot be reached from here (Modal, Daytona), built from their
//! published API definitions. They run commands as real processes on this machine, each
//! marked with its fake sandbox's id in its environment, so "terminate the sandbox" can end
//! them all and the tests can look for survivors.

pub mod daytona;
pub mod modal;

/// Kills every process whose environment carries `NAME=value` (a fake sandbox ending).
pub fn kill_marked(name: &str, value: &str) {
    let needle = format!("{name}={value}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            // SAFETY: kill(2) on a PID read from /proc.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
