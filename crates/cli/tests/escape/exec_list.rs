//! Executing outside the exec list. (Landlock's exec right is checked on execve only: a step
//! can still map readable bytes with `ld.so FILE` or run a memfd. The docs say so; this file
//! proves what the right does enforce.)

use crate::common::*;

#[test]
fn step_cannot_execute_a_binary_from_a_read_only_tree() {
    let s = Scratch::new();
    let tools = tempfile::tempdir().unwrap();
    let copy = tools.path().join("mytrue");
    std::fs::copy("/bin/true", &copy).unwrap();
    let c = copy.to_str().unwrap();
    let read_only = format!("--read={}", tools.path().display());
    assert_eq!(s.probe_inside(&[&read_only], &["exec", c]), "ERR EACCES");
    let executable = format!("--exec={}", tools.path().display());
    assert_eq!(s.probe_inside(&[&executable], &["exec", c]), "OK");
    assert_eq!(s.probe_outside(&["exec", c]), "OK");
}

#[test]
fn a_command_outside_the_exec_list_is_refused_before_it_starts() {
    let s = Scratch::new();
    let tools = tempfile::tempdir().unwrap();
    let copy = tools.path().join("mytrue");
    std::fs::copy("/bin/true", &copy).unwrap();
    let read_only = format!("--read={}", tools.path().display());
    let out = output_within(
        &mut s.nestbox(&[&read_only], &[copy.to_str().unwrap()]),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("--exec"), "{}", stderr(&out));
}
