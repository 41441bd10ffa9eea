//! New user namespaces (which would undo mount-based protections), joining other namespaces,
//! and the mount family. clone3 answers ENOSYS so libc falls back to clone, whose flags the
//! filter can read.

use crate::common::*;

#[test]
fn step_cannot_create_a_user_namespace() {
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["unshare-user"]), "ERR EPERM");
    // Control in a throwaway child, so the test process keeps its namespace.
    let out = output_within(
        std::process::Command::new("unshare").args(["-U", "true"]),
        std::time::Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "control: unshare -U must work outside: {}",
        stderr(&out)
    );
}

#[test]
fn unshare_tool_fails_inside_with_operation_not_permitted() {
    let s = Scratch::new();
    let out = output_within(
        &mut s.nestbox(&[], &["unshare", "-U", "true"]),
        std::time::Duration::from_secs(30),
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("Operation not permitted"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn clone3_answers_enosys_so_libc_falls_back_to_clone() {
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["clone3"]), "ERR ENOSYS");
    assert_eq!(s.probe_outside(&["clone3"]), "ERR EINVAL");
}

#[test]
fn step_cannot_join_namespaces_or_mount() {
    let s = Scratch::new();
    // setns on fd -1 and mount of a NULL source: outside they fail on the arguments (EBADF,
    // EFAULT); inside the filter answers first with EPERM.
    for (probe, outside) in [
        (vec!["syscall", "setns", "-1", "0"], "ERR EBADF"),
        (
            vec!["syscall", "mount", "0", "0", "0", "0", "0"],
            "ERR EFAULT",
        ),
        (vec!["syscall", "open_tree", "-1", "0", "0"], "ERR EFAULT"),
        (vec!["syscall", "fsopen", "0", "0"], "ERR EFAULT"),
    ] {
        assert_eq!(s.probe_inside(&[], &probe), "ERR EPERM", "{probe:?}");
        if is_root() {
            assert_eq!(s.probe_outside(&probe), outside, "control {probe:?}");
        }
    }
}
