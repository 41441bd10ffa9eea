//! Recursive deletes: `rm -r` and `find -delete` / `find -exec rm`.
//!
//! A recursive delete is judged by how far it reaches (see [`Reach`]): the root file system is
//! hardline; a home, the system's directories, a top-level directory, the parent directory, the
//! whole working directory, a `.git`, or a target known only at run time need approval; a
//! narrow relative or deep absolute path (`rm -rf ./build`, `rm -rf node_modules`) is clean.

use super::super::Tier;
use super::super::command::{Invocation, has_flag, operands};
use super::super::paths::{Reach, reach};
use super::Rule;

pub(crate) const RM_ROOT: Rule = Rule {
    id: "rm.recursive_root",
    tier: Tier::Hardline,
    reason: "recursively deletes the root file system",
};

pub(crate) const RM_HOME: Rule = Rule {
    id: "rm.recursive_home",
    tier: Tier::Approval,
    reason: "recursively deletes a home directory (or its SSH/GPG keys)",
};

pub(crate) const RM_SYSTEM: Rule = Rule {
    id: "rm.recursive_system_path",
    tier: Tier::Approval,
    reason: "recursively deletes a system or top-level directory",
};

pub(crate) const RM_PARENT: Rule = Rule {
    id: "rm.recursive_parent_path",
    tier: Tier::Approval,
    reason: "recursively deletes a path outside the working directory (`..`)",
};

pub(crate) const RM_WORKDIR: Rule = Rule {
    id: "rm.recursive_workdir",
    tier: Tier::Approval,
    reason: "recursively deletes the whole working directory",
};

pub(crate) const RM_GIT: Rule = Rule {
    id: "rm.recursive_git_dir",
    tier: Tier::Approval,
    reason: "deletes a git repository's history (`.git`)",
};

pub(crate) const RM_UNKNOWN: Rule = Rule {
    id: "rm.recursive_unknown_target",
    tier: Tier::Approval,
    reason: "recursively deletes a path that is only known at run time",
};

pub(crate) const RM_SPLIT: Rule = Rule {
    id: "rm.unquoted_expansion",
    tier: Tier::Approval,
    reason: "`rm` with an unquoted expansion, which may expand to flags such as `-rf` and to any path",
};

pub(crate) const FIND_ROOT: Rule = Rule {
    id: "find.delete_root",
    tier: Tier::Hardline,
    reason: "`find` deletes everything under the root file system",
};

pub(crate) const FIND_WIDE: Rule = Rule {
    id: "find.delete_wide",
    tier: Tier::Approval,
    reason: "`find` deletes files across a home, system, top-level or parent directory, or the whole working directory",
};

/// Checks `rm` and `find`.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    match program {
        "rm" => rm(inv, sink),
        "find" => find(inv, sink),
        _ => {}
    }
}

fn rule_for(r: Reach) -> Option<&'static Rule> {
    match r {
        Reach::Root => Some(&RM_ROOT),
        Reach::Home => Some(&RM_HOME),
        Reach::System | Reach::TopLevel => Some(&RM_SYSTEM),
        Reach::Parent => Some(&RM_PARENT),
        Reach::Workdir => Some(&RM_WORKDIR),
        Reach::GitDir => Some(&RM_GIT),
        Reach::Unknown => Some(&RM_UNKNOWN),
        Reach::Narrow => None,
    }
}

fn rm(inv: &Invocation, sink: &mut super::Sink) {
    let args = inv.args();
    if args.iter().any(|a| a.splits) {
        sink.hit(&RM_SPLIT, &inv.site);
    }
    let recursive = has_flag(args, 'r', &["--recursive"]) || has_flag(args, 'R', &[]);
    if !recursive {
        // `rm .git` without -r fails; a plain `rm` deletes named files only.
        return;
    }
    let mut targets: Vec<Reach> = operands(args)
        .map(|a| reach(inv.path(a).as_deref()))
        .collect();
    if inv.appends_input {
        targets.push(Reach::Unknown);
    }
    let mut worst: Vec<&'static Rule> = targets.into_iter().filter_map(rule_for).collect();
    worst.sort_by_key(|r| std::cmp::Reverse(r.tier));
    worst.dedup_by_key(|r| r.id);
    for rule in worst {
        sink.hit(rule, &inv.site);
    }
}

/// `find` expression words that narrow which files match.
const FIND_TESTS: &[&str] = &[
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-type",
    "-xtype",
    "-size",
    "-empty",
    "-newer",
    "-anewer",
    "-cnewer",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-user",
    "-group",
    "-uid",
    "-gid",
    "-perm",
    "-links",
    "-inum",
    "-samefile",
    "-lname",
    "-ilname",
    "-nouser",
    "-nogroup",
    "-used",
    "-fstype",
    "-readable",
    "-writable",
    "-executable",
    "-context",
    "-newermt",
];

/// Programs that delete what `find -exec` hands them.
const DELETERS: &[&str] = &["rm", "unlink", "rmdir", "shred"];

fn find(inv: &Invocation, sink: &mut super::Sink) {
    let args = inv.args();
    let mut roots = Vec::new();
    let mut i = 0;
    // Leading options (-H, -L, -P, -D debugopts, -Olevel), then start points.
    while i < args.len() {
        match args[i].value() {
            Some("-H" | "-L" | "-P") => i += 1,
            Some("-D") => i += 2,
            Some(v) if v.starts_with("-O") => i += 1,
            _ => break,
        }
    }
    while i < args.len() {
        match args[i].value() {
            Some(v) if v.starts_with('-') || v == "(" || v == "!" => break,
            _ => roots.push(inv.path(&args[i])),
        }
        i += 1;
    }
    let expr = &args[i.min(args.len())..];
    let mut deletes = false;
    let mut filtered = false;
    for (k, a) in expr.iter().enumerate() {
        match a.value() {
            Some("-delete") => deletes = true,
            Some("-exec" | "-execdir" | "-ok" | "-okdir") => {
                let prog = expr
                    .get(k + 1)
                    .and_then(|a| a.value())
                    .map(super::super::command::basename);
                if prog.is_some_and(|p| DELETERS.contains(&p)) {
                    deletes = true;
                }
            }
            Some(v) if FIND_TESTS.contains(&v) => filtered = true,
            _ => {}
        }
    }
    if !deletes {
        return;
    }
    if roots.is_empty() {
        roots.push(inv.path(&super::super::word::Arg::literal(".", ".")));
    }
    let mut worst: Option<&'static Rule> = None;
    for root in roots {
        let rule = match (reach(root.as_deref()), filtered) {
            (Reach::Root, false) => Some(&FIND_ROOT),
            (Reach::Narrow | Reach::GitDir, _) | (Reach::Workdir, true) => None,
            _ => Some(&FIND_WIDE),
        };
        if let Some(rule) = rule
            && worst.is_none_or(|w| rule.tier > w.tier)
        {
            worst = Some(rule);
        }
    }
    if let Some(rule) = worst {
        sink.hit(rule, &inv.site);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn deleting_the_root_file_system_is_hardline_however_it_is_spelled() {
        for cmd in [
            "rm -rf /",
            "rm -fr /*",
            "rm -rf --no-preserve-root /",
            "rm -r -f /",
            "rm --recursive --force /",
            "rm -Rf //",
            "rm -rf /.",
            "rm / -rf",
            "/bin/rm -rf /",
            "rm -rf -- /",
            "rm -rf /{etc,usr,}",
        ] {
            assert_finds(cmd, "rm.recursive_root", Tier::Hardline);
        }
    }

    #[test]
    fn deleting_homes_and_system_paths_needs_approval() {
        assert_finds("rm -rf ~", "rm.recursive_home", Tier::Approval);
        assert_finds("rm -rf \"$HOME\"", "rm.recursive_home", Tier::Approval);
        assert_finds("rm -rf ~/.ssh", "rm.recursive_home", Tier::Approval);
        assert_finds("rm -rf /home", "rm.recursive_home", Tier::Approval);
        assert_finds("rm -rf /etc", "rm.recursive_system_path", Tier::Approval);
        assert_finds(
            "rm -rf /usr/lib",
            "rm.recursive_system_path",
            Tier::Approval,
        );
        assert_finds("rm -rf /opt", "rm.recursive_system_path", Tier::Approval);
        assert_finds(
            "rm -rf ../other",
            "rm.recursive_parent_path",
            Tier::Approval,
        );
        assert_finds("rm -rf *", "rm.recursive_workdir", Tier::Approval);
        assert_finds("rm -rf .git", "rm.recursive_git_dir", Tier::Approval);
        assert_finds(
            "rm -rf \"$DIR\"",
            "rm.recursive_unknown_target",
            Tier::Approval,
        );
        assert_finds("rm $FILES", "rm.unquoted_expansion", Tier::Approval);
    }

    #[test]
    fn deleting_narrow_paths_is_clean() {
        for cmd in [
            "rm -rf ./build",
            "rm -rf node_modules",
            "rm -rf target/debug",
            "rm -rf /tmp/build-123",
            "rm -rf ~/project/dist",
            "rm -f /etc/passwd.lock.tmp.x ./a",
            "rm file.txt",
            "rm -f \"$TMPFILE\"",
        ] {
            assert_clean(cmd);
        }
    }

    #[test]
    fn find_deleting_everything_is_judged_by_its_start_points() {
        assert_finds("find / -delete", "find.delete_root", Tier::Hardline);
        assert_finds(
            "find / -exec rm -rf {} +",
            "find.delete_root",
            Tier::Hardline,
        );
        assert_finds(
            "find / -name '*.log' -delete",
            "find.delete_wide",
            Tier::Approval,
        );
        assert_finds("find ~ -type f -delete", "find.delete_wide", Tier::Approval);
        assert_finds("find . -delete", "find.delete_wide", Tier::Approval);
        assert_clean("find . -name '*.pyc' -delete");
        assert_clean("find ./build -delete");
        assert_clean("find / -name passwd");
    }

    #[test]
    fn xargs_feeding_a_recursive_rm_needs_approval() {
        assert_finds(
            "find . -name x | xargs rm -rf",
            "rm.recursive_unknown_target",
            Tier::Approval,
        );
        assert_clean("find . -name '*.o' | xargs rm");
    }
}
