//! Permission and ownership changes that open a system up: world-writable trees, setuid bits,
//! recursive changes across system paths or homes.

use super::super::Tier;
use super::super::command::{Invocation, has_flag};
use super::super::paths::{Reach, reach};
use super::super::word::Arg;
use super::Rule;

pub(crate) const WORLD_WRITABLE_TREE: Rule = Rule {
    id: "perms.world_writable_recursive",
    tier: Tier::Approval,
    reason: "makes a whole directory tree writable by every user",
};

pub(crate) const WORLD_WRITABLE_SYSTEM: Rule = Rule {
    id: "perms.world_writable_system",
    tier: Tier::Approval,
    reason: "makes a system or home path writable by every user",
};

pub(crate) const SETUID: Rule = Rule {
    id: "perms.setuid",
    tier: Tier::Approval,
    reason: "sets the setuid or setgid bit (the file then runs with its owner's privileges)",
};

pub(crate) const CHMOD_SYSTEM: Rule = Rule {
    id: "perms.chmod_recursive_system",
    tier: Tier::Approval,
    reason: "recursively changes permissions across the root, a system path or a home",
};

pub(crate) const CHOWN_SYSTEM: Rule = Rule {
    id: "perms.chown_recursive_system",
    tier: Tier::Approval,
    reason: "recursively changes ownership across the root, a system path or a home",
};

fn wide(r: Reach) -> bool {
    matches!(
        r,
        Reach::Root | Reach::Home | Reach::System | Reach::TopLevel | Reach::Parent
    )
}

/// Splits `chmod`/`chown` arguments into the first operand (mode or owner) and the paths.
/// `chmod -w file` is a mode, not an option, so dash words that look like modes count.
fn split_operands(args: &[Arg], modes_may_dash: bool) -> (Option<&Arg>, Vec<&Arg>) {
    let mut first = None;
    let mut paths = Vec::new();
    let mut after_dashdash = false;
    for a in args {
        let v = a.value();
        if !after_dashdash && v == Some("--") {
            after_dashdash = true;
            continue;
        }
        let looks_like_mode =
            v.is_some_and(|v| v.len() > 1 && v[1..].chars().all(|c| "rwxXst".contains(c)));
        let is_option = !after_dashdash
            && v.is_some_and(|v| v.starts_with('-') && v.len() > 1)
            && !(modes_may_dash && first.is_none() && looks_like_mode);
        if is_option {
            continue;
        }
        if first.is_none() {
            first = Some(a);
        } else {
            paths.push(a);
        }
    }
    (first, paths)
}

struct Mode {
    world_writable: bool,
    setuid: bool,
}

fn parse_mode(m: &str) -> Mode {
    if !m.is_empty() && m.chars().all(|c| c.is_digit(8)) {
        let digits: Vec<u32> = m.chars().filter_map(|c| c.to_digit(8)).collect();
        let others = digits.last().copied().unwrap_or(0);
        let special = if digits.len() >= 4 {
            digits[digits.len() - 4]
        } else {
            0
        };
        return Mode {
            world_writable: others & 2 != 0,
            setuid: special & 6 != 0,
        };
    }
    let mut mode = Mode {
        world_writable: false,
        setuid: false,
    };
    for clause in m.split(',') {
        let who: String = clause.chars().take_while(|c| "ugoa".contains(*c)).collect();
        let rest = &clause[who.len()..];
        let grants = rest.contains('+') || rest.contains('=');
        let perms: String = rest.chars().filter(|c| !"+-=".contains(*c)).collect();
        if grants && perms.contains('w') && (who.contains('o') || who.contains('a')) {
            mode.world_writable = true;
        }
        if grants && perms.contains('s') {
            mode.setuid = true;
        }
    }
    mode
}

/// Checks `chmod` and `chown`/`chgrp`.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    let args = inv.args();
    let recursive = has_flag(args, 'R', &["--recursive"]);
    match program {
        "chmod" => {
            let (mode, paths) = split_operands(args, true);
            let Some(mode) = mode.and_then(Arg::value) else {
                return;
            };
            let m = parse_mode(mode);
            let any_wide = paths.iter().any(|p| wide(reach(inv.path(p).as_deref())));
            if m.world_writable && recursive {
                sink.hit(&WORLD_WRITABLE_TREE, &inv.site);
            } else if m.world_writable && any_wide {
                sink.hit(&WORLD_WRITABLE_SYSTEM, &inv.site);
            }
            if m.setuid {
                sink.hit(&SETUID, &inv.site);
            }
            if recursive && any_wide {
                sink.hit(&CHMOD_SYSTEM, &inv.site);
            }
        }
        "chown" | "chgrp" => {
            let (_, paths) = split_operands(args, false);
            if recursive && paths.iter().any(|p| wide(reach(inv.path(p).as_deref()))) {
                sink.hit(&CHOWN_SYSTEM, &inv.site);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn world_writable_trees_need_approval() {
        assert_finds(
            "chmod -R 777 ./shared",
            "perms.world_writable_recursive",
            Tier::Approval,
        );
        assert_finds(
            "chmod --recursive a+w .",
            "perms.world_writable_recursive",
            Tier::Approval,
        );
        assert_finds(
            "chmod -R o+rwx data",
            "perms.world_writable_recursive",
            Tier::Approval,
        );
        assert_finds(
            "chmod 666 /etc/passwd",
            "perms.world_writable_system",
            Tier::Approval,
        );
    }

    #[test]
    fn setuid_and_wide_recursive_changes_need_approval() {
        assert_finds("chmod u+s /bin/bash", "perms.setuid", Tier::Approval);
        assert_finds("chmod 4755 ./tool", "perms.setuid", Tier::Approval);
        assert_finds(
            "chmod -R 755 /",
            "perms.chmod_recursive_system",
            Tier::Approval,
        );
        assert_finds(
            "sudo chown -R nobody /etc",
            "perms.chown_recursive_system",
            Tier::Approval,
        );
        assert_finds(
            "chown -R me:me ~",
            "perms.chown_recursive_system",
            Tier::Approval,
        );
    }

    #[test]
    fn ordinary_permission_changes_are_clean() {
        for cmd in [
            "chmod 755 script.sh",
            "chmod +x ./run.sh",
            "chmod -w notes.txt",
            "chmod -R u+rwX,go-w ./build",
            "chmod 644 ~/.ssh/config",
            "chown -R $(id -u) ./target",
            "chown me file",
        ] {
            assert_clean(cmd);
        }
    }
}
