//! Other processes: signalling, tracing or reading the memory and environment of processes
//! outside the cage; and the step's own tree outliving it (timeouts, setsid daemons, a killed
//! launcher).

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn step_cannot_signal_a_process_outside() {
    let s = Scratch::new();
    let mut victim = Victim::sleeping();
    let pid = victim.pid().to_string();
    let term = libc::SIGTERM.to_string();
    // In its own PID namespace the step cannot name the victim (ESRCH); without one, Landlock's
    // signal scope refuses (EPERM).
    let answer = s.probe_inside(&[], &["kill", &pid, &term]);
    assert!(answer == "ERR ESRCH" || answer == "ERR EPERM", "{answer}");
    assert!(victim.alive(), "the victim must survive");
    assert_eq!(s.probe_outside(&["kill", &pid, "0"]), "OK");
}

#[test]
fn step_cannot_signal_pid_1_which_is_outside_its_domain() {
    // PID 1 is visible in every mode (the namespace's init, or the machine's) and never in the
    // step's Landlock domain: the refusal is Landlock's signal scope.
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["kill", "1", "15"]), "ERR EPERM");
    assert_eq!(s.probe_inside(&[], &["kill", "1", "0"]), "ERR EPERM");
}

#[test]
fn step_cannot_ptrace_a_process_outside() {
    let s = Scratch::new();
    let victim = Victim::sleeping();
    let pid = victim.pid().to_string();
    let answer = s.probe_inside(&[], &["ptrace", &pid]);
    assert!(answer == "ERR ESRCH" || answer == "ERR EPERM", "{answer}");
    assert_eq!(s.probe_inside(&[], &["ptrace", "1"]), "ERR EPERM");
    assert_eq!(s.probe_outside(&["ptrace", &pid]), "OK");
}

#[test]
fn step_cannot_read_another_process_memory() {
    let s = Scratch::new();
    let victim = Victim::sleeping();
    let pid = victim.pid().to_string();
    assert_eq!(
        s.probe_inside(&[], &["process_vm_readv", "1", "0x1000"]),
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
    let answer = s.probe_inside(&[], &["read", &environ]);
    assert!(answer == "ERR ENOENT" || answer == "ERR EACCES", "{answer}");
    assert_eq!(s.probe_outside(&["read", &environ]), "OK");
    // PID 1 is outside the step's Landlock domain: its environment is refused by Landlock.
    assert_eq!(
        s.probe_inside(&[], &["read", "/proc/1/environ"]),
        "ERR EACCES"
    );
    // Its own /proc stays readable.
    assert_eq!(s.probe_inside(&[], &["read", "/proc/self/environ"]), "OK");
}

#[test]
fn step_cannot_see_other_processes_command_lines() {
    // A token passed as an argument by some other program on this machine.
    let marker = format!("--token=nestbox-test-{}", std::process::id());
    let mut other = std::process::Command::new("/bin/sh")
        .args(["-c", "sleep 300; true", &marker])
        .process_group(0)
        .spawn()
        .unwrap();
    let s = Scratch::new();
    let script = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'nestbox-tes[t]-'";
    let out = output_within(
        &mut s.nestbox(&[], &["/bin/sh", "-c", script]),
        Duration::from_secs(30),
    );
    let report_mode = nestbox_cage::probe::can_create_netns();
    if report_mode {
        assert_eq!(stdout(&out).trim(), "0", "{}", stderr(&out));
    }
    // Control: outside, the command line is there for anyone to read.
    let control = std::process::Command::new("/bin/sh")
        .args(["-c", script])
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&control.stdout).trim(), "0");
    // SAFETY: killing the process group we created.
    unsafe { libc::kill(-(other.id() as i32), libc::SIGKILL) };
    other.wait().unwrap();
}

#[test]
fn timeout_kills_grandchildren_and_setsid_daemons() {
    let s = Scratch::new();
    let t = unique_sleep();
    let script = format!(
        "setsid sh -c 'exec sleep {t}' & sh -c 'exec sleep {t}' & touch started; sleep {t}"
    );
    let child = s
        .nestbox(&["--timeout", "2s"], &["/bin/sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while processes_with(&format!("sleep {t}")).len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the step's processes never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("timed out after 2s"),
        "{}",
        stderr(&out)
    );
    assert!(
        processes_with(&format!("sleep {t}")).is_empty(),
        "a process survived the timeout"
    );
}

#[test]
fn background_processes_do_not_outlive_the_step() {
    let s = Scratch::new();
    let t = unique_sleep();
    let report = s.path().join("report.json");
    let script = format!("setsid sh -c 'exec sleep {t}' & sleep 0.3");
    let out = output_within(
        &mut s.nestbox(
            &["--report", report.to_str().unwrap()],
            &["/bin/sh", "-c", &script],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        processes_with(&format!("sleep {t}")).is_empty(),
        "the setsid daemon outlived the step"
    );
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
fn killing_the_launcher_kills_the_step_and_everything_it_started() {
    let s = Scratch::new();
    let t = unique_sleep();
    let script = format!("setsid sh -c 'exec sleep {t}' & sleep {t}");
    let mut launcher = s
        .nestbox(&[], &["/bin/sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while processes_with(&format!("sleep {t}")).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the step's processes never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&format!("sleep {t}")).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = processes_with(&format!("sleep {t}"));
    if nestbox_cage::probe::can_create_netns() {
        // With its own PID namespace, nothing of the step survives the launcher's SIGKILL.
        assert!(left.is_empty(), "processes outlived the launcher: {left:?}");
    } else {
        // Without one, the main process dies (parent-death signal); a setsid daemon may not.
        assert!(left.len() <= 1, "{left:?}");
        for pid in left {
            // SAFETY: cleaning up our own test's leftover.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
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
