//! File metadata, which Landlock does not govern: set-user-ID bits (a way to root for a root
//! step, or to the step's user for anyone running the file) and extended attributes (an owner
//! can grant others access through a POSIX ACL). The filter refuses both.

use crate::common::*;

#[test]
fn step_cannot_make_a_set_id_program() {
    let s = Scratch::new();
    std::fs::copy("/bin/true", s.path().join("mine")).unwrap();
    assert_eq!(s.probe_inside(&[], &["chmod", "mine", "4755"]), "ERR EPERM");
    assert_eq!(s.probe_inside(&[], &["chmod", "mine", "2755"]), "ERR EPERM");
    // Ordinary modes stay available: builds mark what they make executable.
    assert_eq!(s.probe_inside(&[], &["chmod", "mine", "755"]), "OK");
    assert_eq!(s.probe_outside(&["chmod", "mine", "4755"]), "OK");
}

#[test]
fn step_cannot_set_extended_attributes_or_acls() {
    let s = Scratch::new();
    std::fs::write(s.path().join("f"), "x").unwrap();
    assert_eq!(
        s.probe_inside(&[], &["setxattr", "f", "user.nestbox"]),
        "ERR ENOTSUP"
    );
    assert_eq!(
        s.probe_inside(&[], &["setxattr", "f", "system.posix_acl_access"]),
        "ERR ENOTSUP"
    );
    assert_eq!(s.probe_outside(&["setxattr", "f", "user.nestbox"]), "OK");
}
