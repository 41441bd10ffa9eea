//! A caged step and its relay, end to end through `nestbox run`: the relay is the step's one
//! network exit in netns mode and in port mode, it lives exactly as long as the step, it chains
//! through a real upstream proxy, and real clients reach the real package registries through it.

#[path = "../common/mod.rs"]
mod common;

mod lifecycle;
mod modes;
mod registries;
mod repository;
mod upstream;

use std::time::{Duration, Instant};

use common::*;

/// Pids of relays started for `step_id` (found by their command line).
pub fn relays_of(step_id: &str) -> Vec<i32> {
    let needle = format!("--step-id={step_id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let text = String::from_utf8_lossy(&c).replace('\0', " ");
                    text.contains("nestbox relay") && text.contains(&needle)
                })
                .unwrap_or(false)
        })
        .filter(|&pid| pid_alive(pid))
        .collect()
}

/// Waits until `f` holds, failing after `limit`.
pub fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The step id, from a file the step wrote with `echo $TMPDIR > FILE`.
pub fn step_id_from(path: &std::path::Path) -> String {
    let mut text = String::new();
    eventually(
        Duration::from_secs(20),
        "the step writing its TMPDIR",
        || {
            text = std::fs::read_to_string(path).unwrap_or_default();
            text.ends_with('\n')
        },
    );
    text.trim()
        .trim_end_matches("/tmp")
        .rsplit("nestbox-")
        .next()
        .unwrap()
        .to_string()
}

/// curl inside the step: prints the status code and the X-Nestbox-Denied header, if any.
pub const CURL_STATUS: &str = "curl -sS -o /dev/null -D headers.txt -w '%{http_code}' \"$0\"; grep -i '^x-nestbox-denied' headers.txt | tr -d '\\r' | sed 's/^/ /'";

pub fn caged_curl(s: &Scratch, extra: &[&str], url: &str) -> String {
    let out = output_within(
        &mut s.nestbox(extra, &["/bin/sh", "-c", CURL_STATUS, url]),
        Duration::from_secs(60),
    );
    format!(
        "{}{}",
        stdout(&out).trim(),
        if out.status.success() {
            ""
        } else {
            " (failed)"
        }
    )
    .trim()
    .to_string()
}
