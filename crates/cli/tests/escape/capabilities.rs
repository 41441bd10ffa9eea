//! Root without capabilities: a root step keeps no capability (CAP_SYS_PTRACE or CAP_PERFMON
//! would let it read other processes' environ despite Landlock).

use crate::common::*;

#[test]
fn a_root_step_holds_no_capabilities() {
    let s = Scratch::new();
    let out = output_within(
        &mut s.nestbox(
            &[],
            &["/bin/grep", "-E", "^(Cap|NoNewPrivs)", "/proc/self/status"],
        ),
        std::time::Duration::from_secs(30),
    );
    let status = stdout(&out);
    for line in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let value = status
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("{line} missing:\n{status}"));
        assert!(value.ends_with("0000000000000000"), "{value}");
    }
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    if is_root() {
        let mine = std::fs::read_to_string("/proc/self/status").unwrap();
        let eff = mine.lines().find(|l| l.starts_with("CapEff")).unwrap();
        assert!(
            !eff.ends_with("0000000000000000"),
            "control: root outside has capabilities"
        );
    }
}

#[test]
fn user_flag_runs_the_step_as_another_user() {
    if !is_root() {
        return; // --user needs a root launcher; the refusal is tested in run::user_needs_root
    }
    let s = Scratch::new();
    let out = output_within(
        &mut s.nestbox(&["--user", "65534:65534"], &["/usr/bin/id", "-u"]),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(stdout(&out).trim(), "65534", "{}", stderr(&out));
}
