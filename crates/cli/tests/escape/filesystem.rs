//! Reading and writing outside the lists.

use crate::common::*;

#[test]
fn step_cannot_read_a_secret_in_the_callers_home() {
    let s = Scratch::new();
    let home = tempfile::tempdir().unwrap();
    let key = home.path().join(".ssh/id_ed25519");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
    let key = key.to_str().unwrap();
    let mut cmd = s.nestbox(&[], &[PYTHON, "probe.py", "read", key]);
    cmd.env("HOME", home.path());
    let out = output_within(&mut cmd, std::time::Duration::from_secs(30));
    assert_eq!(stdout(&out).trim(), "ERR EACCES", "{}", stderr(&out));
    assert_eq!(s.probe_outside(&["read", key]), "OK");
}

#[test]
fn step_cannot_read_shadow_or_tls_private_keys() {
    let s = Scratch::new();
    if std::path::Path::new("/etc/shadow").exists() {
        assert_eq!(s.probe_inside(&[], &["read", "/etc/shadow"]), "ERR EACCES");
        if is_root() {
            assert_eq!(s.probe_outside(&["read", "/etc/shadow"]), "OK");
        }
    }
    if std::path::Path::new("/etc/ssl/private").exists() {
        assert_eq!(
            s.probe_inside(&[], &["list", "/etc/ssl/private"]),
            "ERR EACCES"
        );
        if is_root() {
            assert_eq!(s.probe_outside(&["list", "/etc/ssl/private"]), "OK");
        }
    }
    // The certificates beside them stay readable: TLS clients need them.
    assert_eq!(s.probe_inside(&[], &["list", "/etc/ssl/certs"]), "OK");
}

#[test]
fn step_cannot_write_outside_its_write_list() {
    let s = Scratch::new();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("planted");
    let t = target.to_str().unwrap();
    assert_eq!(s.probe_inside(&[], &["write", t]), "ERR EACCES");
    assert!(!target.exists(), "the write must not have happened");
    assert_eq!(s.probe_outside(&["write", t]), "OK");
    // Inside the working directory the same write works.
    assert_eq!(s.probe_inside(&[], &["write", "inside.txt"]), "OK");
    assert!(s.path().join("inside.txt").exists());
}

#[test]
fn step_cannot_truncate_a_file_it_may_only_read() {
    let s = Scratch::new();
    let ro = tempfile::tempdir().unwrap();
    let file = ro.path().join("data");
    std::fs::write(&file, "keep me").unwrap();
    let f = file.to_str().unwrap();
    let read_flag = format!("--read={}", ro.path().display());
    assert_eq!(s.probe_inside(&[&read_flag], &["read", f]), "OK");
    assert_eq!(
        s.probe_inside(&[&read_flag], &["truncate", f]),
        "ERR EACCES"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    assert_eq!(s.probe_outside(&["truncate", f]), "OK");
}

#[test]
fn step_cannot_write_into_the_parent_of_its_working_directory() {
    let parent = tempfile::tempdir().unwrap();
    let work = parent.path().join("repo");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(
        work.join("probe.py"),
        std::fs::read(Scratch::new().path().join("probe.py")).unwrap(),
    )
    .unwrap();
    let escape = parent.path().join("escaped");
    let out = output_within(
        std::process::Command::new(nestbox_bin())
            .args(["run", "--workdir"])
            .arg(&work)
            .args(["--", PYTHON, "probe.py", "write", "../escaped"]),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(stdout(&out).trim(), "ERR EACCES", "{}", stderr(&out));
    assert!(!escape.exists());
}
