//! Other processes: signalling, tracing or reading the memory and environment of processes
//! outside the cage; and the step's own tree outliving it (timeouts, setsid daemons, a killed
//! launcher).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn step_cannot_signal_a_process_outside() {
    let s = Scratch::new();
    let mut victim = Victim::sleeping();
    let pid = victim.pid().to_string();
    let term = libc::SIGTERM.to_string();
    assert_eq!(s.probe_inside(&[], &["kill", &pid, &term]), "ERR EPERM");
    assert!(victim.alive(), "the victim must survive");
    assert_eq!(s.probe_outside(&["kill", &pid, "0"]), "OK");
}

#[test]
fn step_cannot_ptrace_a_process_outside() {
    let s = Scratch::new();
    let victim = Victim::sleeping();
    let pid = victim.pid().to_string();
    assert_eq!(s.probe_inside(&[], &["ptrace", &pid]), "ERR EPERM");
    assert_eq!(s.probe_outside(&["ptrace", &pid]), "OK");
}

#[test]
fn step_cannot_read_another_process_memory() {
    let s = Scratch::new();
    let victim = Victim::sleeping();
    let pid = victim.pid().to_string();
    assert_eq!(
        s.probe_inside(&[], &["process_vm_readv", &pid, "0x1000"]),
        "ERR EPERM"
    );
    // Outside the call is allowed and fails only on the bogus address.
    assert_eq!(
        s.probe_outside(&["process_vm_readv", &pid, "0x1000"]),
        "ERR EFAULT"
    );
}

#[test]
fn step_cannot_read_the_environment_of_a_process_outside() {
    let s = Scratch::new();
    let victim = Victim::sleeping();
    let environ = format!("/proc/{}/environ", victim.pid());
    assert_eq!(s.probe_inside(&[], &["read", &environ]), "ERR EACCES");
    assert_eq!(s.probe_outside(&["read", &environ]), "OK");
    // Its own /proc stays readable.
    assert_eq!(s.probe_inside(&[], &["read", "/proc/self/environ"]), "OK");
}

fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn timeout_kills_grandchildren_and_setsid_daemons() {
    let s = Scratch::new();
    let script = "setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' & \
                  sh -c 'echo $$ > grandchild.pid; exec sleep 300' & \
                  sleep 300";
    let out = output_within(
        &mut s.nestbox(&["--timeout", "1s"], &["/bin/sh", "-c", script]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("timed out after 1s"),
        "{}",
        stderr(&out)
    );
    for f in ["daemon.pid", "grandchild.pid"] {
        let pid = read_pid(&s.path().join(f));
        assert!(!pid_alive(pid), "{f} ({pid}) survived the timeout");
    }
}

#[test]
fn background_processes_do_not_outlive_the_step() {
    let s = Scratch::new();
    let report = s.path().join("report.json");
    let out = output_within(
        &mut s.nestbox(
            &["--report", report.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                "setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' & sleep 0.3",
            ],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pid = read_pid(&s.path().join("daemon.pid"));
    assert!(!pid_alive(pid), "the setsid daemon outlived the step");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert!(
        report["outcome"]["leftover_processes_killed"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

#[test]
fn killing_the_launcher_kills_the_step() {
    let s = Scratch::new();
    let mut launcher = s
        .nestbox(
            &[],
            &["/bin/sh", "-c", "echo $$ > step.pid; exec sleep 300"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = read_pid(&s.path().join("step.pid"));
    assert!(pid_alive(pid));
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pid_alive(pid), "the step outlived its launcher");
}

fn signal_reaches_step(signal: libc::c_int, name: &str) {
    let s = Scratch::new();
    let script = format!(
        "trap 'echo got > {name}.txt; exit 42' {name}; touch ready; while :; do sleep 0.05; done"
    );
    let mut launcher = s
        .nestbox(&[], &["/bin/sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = s.path().join("ready");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(launcher.id() as i32, signal) };
    let status = launcher.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(42),
        "the step's trap decides the status"
    );
    assert!(s.path().join(format!("{name}.txt")).exists());
}

#[test]
fn ctrl_c_reaches_the_step() {
    signal_reaches_step(libc::SIGINT, "INT");
}

#[test]
fn sigterm_reaches_the_step() {
    signal_reaches_step(libc::SIGTERM, "TERM");
}

#[test]
fn a_fork_bomb_hits_the_process_limit() {
    let s = Scratch::new();
    // RLIMIT_NPROC counts every process of the user, so leave room for what already runs.
    // SAFETY: trivial getter.
    let uid = unsafe { libc::getuid() };
    let mine = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            use std::os::unix::fs::MetadataExt;
            e.file_name().to_string_lossy().parse::<u32>().is_ok()
                && e.metadata().map(|m| m.uid() == uid).unwrap_or(false)
        })
        .count();
    let limit = mine + 40;
    std::fs::write(
        s.path().join("p.toml"),
        format!("[limits]\nprocesses = {limit}\n"),
    )
    .unwrap();
    let policy = s.path().join("p.toml");
    let answer = s.probe_inside(
        &["--policy", policy.to_str().unwrap()],
        &["fork-until-refused", "2000"],
    );
    assert_eq!(answer, "ERR EAGAIN");
}
