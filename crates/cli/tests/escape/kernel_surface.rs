//! io_uring (its operations bypass a socket filter), bpf, perf_event_open, userfaultfd,
//! keyrings, kexec and modules. Each is called with arguments that make it fail harmlessly
//! outside (EFAULT, EINVAL...), so the control shows the call reaches the kernel there, while
//! inside the filter answers EPERM before the kernel looks at the arguments.

use crate::common::*;

#[test]
fn step_cannot_set_up_io_uring() {
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["io_uring"]), "ERR EPERM");
    assert_eq!(s.probe_outside(&["io_uring"]), "OK");
}

#[test]
fn step_cannot_reach_bpf_perf_userfaultfd_keyrings_kexec_or_modules() {
    let s = Scratch::new();
    let cases: &[(&[&str], &str)] = &[
        (&["bpf", "0xffff", "0", "0"], "ERR EINVAL"),
        (
            &["perf_event_open", "0", "0", "-1", "-1", "0"],
            "ERR EFAULT",
        ),
        (&["userfaultfd", "0xffff"], "ERR EINVAL"),
        (&["add_key", "0", "0", "0", "0", "0"], "ERR EFAULT"),
        (&["keyctl", "0xffff", "0", "0", "0", "0"], "ERR ENOTSUP"),
        (&["kexec_load", "0", "0", "0", "0xffffffff"], "ERR EINVAL"),
        (&["init_module", "0", "0", "0"], "ERR EFAULT"),
        (&["delete_module", "0", "0"], "ERR EFAULT"),
        (&["open_by_handle_at", "-1", "0", "0"], "ERR EFAULT"),
        (&["pidfd_getfd", "-1", "0", "0"], "ERR EBADF"),
        (&["acct", "1"], "ERR EFAULT"),
    ];
    for (args, outside) in cases {
        let mut probe = vec!["syscall"];
        probe.extend_from_slice(args);
        assert_eq!(s.probe_inside(&[], &probe), "ERR EPERM", "{args:?}");
        if is_root() {
            // Outside the kernel sees the call: it fails on the arguments, or the feature is
            // not built in (ENOSYS); either way it is not the cage's EPERM.
            let control = s.probe_outside(&probe);
            assert!(
                &control == outside || control == "ERR ENOSYS",
                "control {args:?}: {control}"
            );
        }
    }
}
