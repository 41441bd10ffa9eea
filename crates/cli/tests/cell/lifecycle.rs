//! The relay lives exactly as long as the step: it is ready before the step starts, gone when
//! the step ends, when the step is killed and when the launcher is killed; killing the relay
//! mid-transfer fails the transfer and opens no other path; many steps each get their own.

use std::process::Stdio;
use std::time::Duration;

use nestbox_testkit::http::{Body, HttpServer};

use crate::common::*;
use crate::{caged_curl, eventually, relays_of, step_id_from};

#[test]
fn the_relay_is_gone_when_the_step_ends() {
    let s = Scratch::new();
    let srv = HttpServer::start("127.0.0.2:0", Body::Text("x".into()));
    let allow = format!("127.0.0.2:{}", srv.port());
    // The very first thing the step does is use the network: the relay must already accept.
    let out = output_within(
        &mut s.nestbox(
            &["--allow", &allow],
            &[
                "/bin/sh",
                "-c",
                "curl -sS \"$0\" && echo $TMPDIR > id.txt",
                &srv.url(),
            ],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(stdout(&out), "x", "{}", stderr(&out));
    let id = step_id_from(&s.path().join("id.txt"));
    eventually(
        Duration::from_secs(1),
        "the relay exiting with its step",
        || relays_of(&id).is_empty(),
    );
}

#[test]
fn the_relay_is_gone_when_the_step_is_killed_or_the_launcher_is_killed() {
    for kill_launcher in [false, true] {
        let s = Scratch::new();
        let t = unique_sleep();
        let script = format!("echo $TMPDIR > id.txt; exec sleep {t}");
        let mut launcher = s
            .nestbox(&["--allow", "127.0.0.2:9"], &["/bin/sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let id = step_id_from(&s.path().join("id.txt"));
        let relays = relays_of(&id);
        assert_eq!(relays.len(), 1, "one relay per step");
        // The relay is nobody's descendant in the step's tree and not the launcher's child.
        let ppid = nestbox_cage::tree::read_ppid(relays[0]).unwrap();
        assert_ne!(ppid, launcher.id() as i32);
        if kill_launcher {
            launcher.kill().unwrap();
        } else {
            // The step's pid as this (host) side sees it; inside its own PID namespace it
            // has another.
            let mut step = Vec::new();
            eventually(Duration::from_secs(20), "the step's sleep", || {
                step = processes_with(&format!("sleep {t}"));
                step.len() == 1
            });
            // SAFETY: plain kill of the step we started.
            unsafe { libc::kill(step[0], libc::SIGKILL) };
        }
        launcher.wait().unwrap();
        eventually(Duration::from_secs(1), "the relay exiting", || {
            relays_of(&id).is_empty()
        });
    }
}

#[test]
fn killing_the_relay_mid_transfer_fails_it_and_opens_no_other_path() {
    let s = Scratch::new();
    let srv = HttpServer::start(
        "127.0.0.2:0",
        Body::Slow {
            total: 20 << 20,
            chunk: 64 << 10,
            pause: Duration::from_millis(20),
        },
    );
    let allow = format!("127.0.0.2:{}", srv.port());
    let port = srv.port().to_string();
    let script = "echo $TMPDIR > id.txt; curl -sS -o big.bin \"$0\"; echo \"curl=$?\"; python3 probe.py tcp 127.0.0.2 \"$1\"";
    let launcher = s
        .nestbox(
            &["--allow", &allow],
            &["/bin/sh", "-c", script, &srv.url(), &port],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = step_id_from(&s.path().join("id.txt"));
    eventually(Duration::from_secs(20), "the download starting", || {
        srv.requests() == 1
    });
    std::thread::sleep(Duration::from_millis(200));
    for pid in relays_of(&id) {
        // SAFETY: killing the relay we found.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let out = launcher.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(!text.contains("curl=0"), "the transfer must fail: {text}");
    assert!(text.contains("curl="), "{text}");
    assert!(
        text.trim_end().ends_with("ERR ECONNREFUSED"),
        "no direct path opens: {text}"
    );
    let got = std::fs::metadata(s.path().join("big.bin"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(got < 20 << 20, "the transfer was cut: {got} bytes");
}

#[test]
fn twenty_steps_at_once_each_have_their_own_relay_and_allowlist() {
    let servers: Vec<HttpServer> = (0..20)
        .map(|i| HttpServer::start("127.0.0.2:0", Body::Text(format!("server {i}"))))
        .collect();
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let mine = servers[i].url();
            let allow = format!("127.0.0.2:{}", servers[i].port());
            let other = servers[(i + 1) % 20].url();
            std::thread::spawn(move || {
                let s = Scratch::new();
                let script =
                    "curl -sS \"$0\"; echo; curl -sS -o /dev/null -w '%{http_code}' \"$1\"";
                let out = output_within(
                    &mut s.nestbox(
                        &["--allow", &allow],
                        &["/bin/sh", "-c", script, &mine, &other],
                    ),
                    Duration::from_secs(120),
                );
                (i, stdout(&out), stderr(&out))
            })
        })
        .collect();
    for h in handles {
        let (i, out, err) = h.join().unwrap();
        assert_eq!(out, format!("server {i}\n403"), "step {i}: {err}");
    }
}

#[test]
fn a_relay_that_cannot_start_refuses_the_step() {
    let s = Scratch::new();
    let marker = s.path().join("ran");
    let out = output_within(
        &mut s.nestbox(
            &["--allow", "not a host!"],
            &["/usr/bin/touch", marker.to_str().unwrap()],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("flag --allow"), "{}", stderr(&out));
    assert!(!marker.exists());
    // An unknown preset is refused with the list of known ones.
    let out = output_within(
        &mut s.nestbox(&["--preset", "pypy"], &["/bin/true"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("pypi"), "{}", stderr(&out));
    let _ = caged_curl;
}
