//! git operations that destroy work: rewriting or deleting remote history, discarding
//! uncommitted changes, deleting untracked files or unmerged branches.
//!
//! `--force-with-lease` is treated like `--force`: it only checks the remote against the local
//! remote-tracking ref, which any background `git fetch` refreshes, so it still overwrites
//! other people's commits; rewriting shared history is a human's call.

use super::super::Tier;
use super::super::command::{Invocation, has_flag, operands};
use super::super::word::Arg;
use super::Rule;

pub(crate) const FORCE_PUSH: Rule = Rule {
    id: "git.force_push",
    tier: Tier::Approval,
    reason: "force-pushes, overwriting the remote's history",
};

pub(crate) const REMOTE_DELETE: Rule = Rule {
    id: "git.push_delete",
    tier: Tier::Approval,
    reason: "deletes branches or tags on the remote",
};

pub(crate) const RESET_HARD: Rule = Rule {
    id: "git.reset_hard",
    tier: Tier::Approval,
    reason: "`git reset --hard` discards uncommitted changes",
};

pub(crate) const CLEAN_FORCE: Rule = Rule {
    id: "git.clean_force",
    tier: Tier::Approval,
    reason: "`git clean -f` deletes untracked files (with -x, ignored ones too)",
};

pub(crate) const BRANCH_FORCE_DELETE: Rule = Rule {
    id: "git.branch_force_delete",
    tier: Tier::Approval,
    reason: "force-deletes a branch, even if it is not merged",
};

pub(crate) const DISCARD: Rule = Rule {
    id: "git.discard_changes",
    tier: Tier::Approval,
    reason: "discards uncommitted changes across the working tree",
};

/// git's options before the subcommand that take a separate value.
const GLOBAL_WITH_VALUE: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--exec-path",
    "--config-env",
    "--super-prefix",
    "--list-cmds",
];

/// The subcommand's index in `args`, skipping git's global options.
fn subcommand(args: &[Arg]) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let v = args[i].value()?;
        if !v.starts_with('-') {
            return Some(i);
        }
        i += if GLOBAL_WITH_VALUE.contains(&v) { 2 } else { 1 };
    }
    None
}

/// Checks git.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    if program != "git" {
        return;
    }
    let args = inv.args();
    let Some(i) = subcommand(args) else { return };
    let sub = args[i].value().unwrap_or("");
    let rest = &args[i + 1..];
    let has_long = |prefix: &str| {
        rest.iter().any(|a| {
            a.value()
                .is_some_and(|v| v == prefix || v.starts_with(&format!("{prefix}=")))
        })
    };
    let rule = match sub {
        "push" => {
            let forced = has_flag(rest, 'f', &["--force"])
                || has_long("--force-with-lease")
                || has_long("--force-if-includes")
                || has_long("--mirror")
                || operands(rest).any(|a| a.value().is_some_and(|v| v.starts_with('+')));
            let deletes = has_flag(rest, 'd', &["--delete"])
                || has_long("--prune")
                || operands(rest)
                    .skip(1)
                    .any(|a| a.value().is_some_and(|v| v.starts_with(':')));
            if forced {
                Some(&FORCE_PUSH)
            } else if deletes {
                Some(&REMOTE_DELETE)
            } else {
                None
            }
        }
        "reset" if has_long("--hard") => Some(&RESET_HARD),
        "clean" if has_flag(rest, 'f', &["--force"]) && !has_flag(rest, 'n', &["--dry-run"]) => {
            Some(&CLEAN_FORCE)
        }
        "branch" => {
            let capital_d = rest.iter().any(|a| {
                a.value()
                    .is_some_and(|v| v.starts_with('-') && !v.starts_with("--") && v.contains('D'))
            });
            let delete_forced = (has_flag(rest, 'd', &["--delete"])
                && has_flag(rest, 'f', &["--force"]))
                || capital_d;
            delete_forced.then_some(&BRANCH_FORCE_DELETE)
        }
        "checkout" | "restore" => {
            let whole_tree = operands(rest).any(|a| a.is(".") || a.is(":/"));
            let forced = sub == "checkout" && has_flag(rest, 'f', &["--force"]);
            (whole_tree || forced).then_some(&DISCARD)
        }
        "stash" if matches!(rest.first().and_then(Arg::value), Some("clear")) => Some(&DISCARD),
        _ => None,
    };
    if let Some(rule) = rule {
        sink.hit(rule, &inv.site);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn force_pushes_need_approval_in_every_spelling() {
        for cmd in [
            "git push --force",
            "git push -f origin main",
            "git push origin +main",
            "git push --force-with-lease origin feature",
            "git -C repo push -uf origin x",
            "git -c user.name=x push --force",
            "git push --mirror backup",
        ] {
            assert_finds(cmd, "git.force_push", Tier::Approval);
        }
        assert_finds(
            "git push origin --delete old",
            "git.push_delete",
            Tier::Approval,
        );
        assert_finds("git push origin :old", "git.push_delete", Tier::Approval);
    }

    #[test]
    fn discarding_work_needs_approval() {
        assert_finds("git reset --hard HEAD~3", "git.reset_hard", Tier::Approval);
        assert_finds("git clean -fdx", "git.clean_force", Tier::Approval);
        assert_finds("git clean -xdf", "git.clean_force", Tier::Approval);
        assert_finds(
            "git branch -D feature",
            "git.branch_force_delete",
            Tier::Approval,
        );
        assert_finds("git checkout -- .", "git.discard_changes", Tier::Approval);
        assert_finds("git restore .", "git.discard_changes", Tier::Approval);
    }

    #[test]
    fn everyday_git_is_clean() {
        for cmd in [
            "git push",
            "git push -u origin feature",
            "git reset --soft HEAD~1",
            "git reset HEAD file",
            "git clean -n",
            "git clean -fdn",
            "git branch -d merged",
            "git checkout -b new",
            "git checkout main -- src/lib.rs",
            "git commit -m 'git push --force is bad; rm -rf /'",
            "git log --oneline -5",
        ] {
            assert_clean(cmd);
        }
    }
}
