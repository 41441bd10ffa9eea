//! Other syscall tables: x32 numbers (`nr | 0x40000000`) and i386 through `int 0x80`. A deny
//! list keyed on x86_64 numbers would miss both; the filter checks the ABI first.
#![cfg(target_arch = "x86_64")]

use crate::common::*;

#[test]
fn x32_syscalls_are_refused_by_the_filter() {
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["x32-getpid"]), "ERR EPERM");
    // Outside, the kernel itself answers: ENOSYS where x32 is off, success where it is on.
    assert_ne!(s.probe_outside(&["x32-getpid"]), "ERR EPERM");
}

#[test]
fn i386_syscalls_through_int_0x80_are_refused() {
    let probe = nestbox_cage::probe::probe();
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["int80-getpid"]), "ERR EPERM");
    if probe.ia32.available {
        assert_eq!(s.probe_outside(&["int80-getpid"]), "OK");
    }
}
