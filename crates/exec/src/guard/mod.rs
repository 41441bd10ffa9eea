//! The guard: decides whether a shell command an agent wants to run is dangerous, before any
//! backend runs it.
//!
//! ```
//! use nestbox_exec::guard::{self, Tier};
//!
//! let v = guard::classify("cd /tmp && sudo rm -rf --no-preserve-root /");
//! assert!(v.is_hardline());
//! assert_eq!(v.findings[0].id, "rm.recursive_root");
//!
//! let v = guard::classify("git push --force origin main");
//! assert!(v.needs_approval());
//! let key = v.findings[0].approval_key().unwrap();
//! assert_eq!(key.as_str(), "git.force_push git push --force origin main");
//!
//! assert!(guard::classify("grep 'rm -rf /' notes.txt").is_clean());
//! ```
//!
//! # Two tiers
//!
//! A [`Finding`] is either [`Tier::Hardline`] (nothing may approve it: no mode, no "always",
//! no flag) or [`Tier::Approval`] (a human, or a policy acting for one, may let it run). A
//! command the guard cannot analyse (a syntax error, absurd length or nesting) gets an approval
//! finding `parse.unanalysed`: unknown is never clean.
//!
//! # What "always approve" stores
//!
//! [`Finding::approval_key`] is the rule id plus the normalized words of the command that
//! triggered it (quotes removed, wrappers and redirections kept, pipelines kept whole for the
//! pipe rules). It approves that command, not the class: approving
//! `git push --force origin feature` does not approve `git push --force origin main`.
//! [`Verdict::is_covered_by`] answers "did earlier approvals cover everything here?" and is
//! always false for a hardline verdict.
//!
//! # The parser
//!
//! Commands are parsed with [`brush_parser`], the parser of the brush shell. Candidates weighed:
//!
//! * `brush-parser` (MIT): a bash grammar (a superset of POSIX sh) with here-documents, process
//!   substitution, `[[ ]]`, functions and a separate word parser that splits quoting, escapes,
//!   parameter expansion and command substitution; released and maintained with the brush
//!   shell, which runs bash's own test cases against it.
//! * `yash-syntax`: a careful POSIX parser, but GPL-3.0, which an Apache-2.0 binary cannot
//!   take, and no bash extensions (`<(...)`, `[[`, `$'...'`) that agents use daily.
//! * `conch-parser`: last released in 2019 and unmaintained.
//! * `tree-sitter-bash`: an editor grammar that recovers from errors rather than reporting them
//!   (the guard needs "could not parse" to fail closed) and brings a C build.
//!
//! brush-parser's cost is its dependencies (a PEG generator and a few proc-macro crates), about
//! 20 s of a clean two-core build; its benefit is that quoting, escapes and nesting are decided
//! by a shell grammar instead of by the guard.
//!
//! # What the guard cannot see
//!
//! It reads one command line, not its effects:
//!
//! * code that runs later or elsewhere: a script written to a file and run by a later command,
//!   `make`/`npm run` targets, git hooks, a program's own behaviour;
//! * state from earlier commands: aliases, functions and variables set in another call, and
//!   (on purpose) variables set earlier on the same line: `X=/; rm -rf $X` is an approval for an
//!   unknown target, not a guess that it is `/`;
//! * run-time values: after `cd "$DIR"` relative paths are unknown; `$(...)` output is unknown
//!   except for downloads (flagged) and a few `eval` set-up tools (`ssh-agent`, `direnv`);
//! * other languages: `python -c`, `node -e` and here-documents fed to interpreters are only
//!   skimmed for calls that spawn processes or delete trees;
//! * differences between the parser and the shell that runs the command. One is known and
//!   covered: brush-parser reads `( (cmd) )` as the arithmetic `((cmd))`, so arithmetic text is
//!   also read as commands.
//!
//! It is advice for the approval flow; the cage is the boundary.

mod command;
mod interp;
mod parse;
mod paths;
mod rules;
mod walk;
mod word;
mod wrappers;

use std::fmt;

/// How severe a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Needs a yes from a human (or from a policy acting for one) before it runs.
    Approval,
    /// Never runs: no mode, prompt or stored approval can allow it.
    Hardline,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Approval => "approval",
            Tier::Hardline => "hardline",
        })
    }
}

/// One dangerous thing found in a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable rule id, such as `rm.recursive_root`; safe to log, match and persist.
    pub id: &'static str,
    /// Whether it can be approved at all.
    pub tier: Tier,
    /// What the command would do, for the human deciding.
    pub reason: String,
    /// The part of the command that triggered the rule: the simple command (or pipeline) as
    /// written, even when it sits inside a `bash -c` payload or a command substitution.
    pub matched: String,
    /// Normalized words of `matched`, for the approval key.
    key: Vec<String>,
}

impl Finding {
    /// The precise pattern an "always approve" should store for this finding, or `None` for a
    /// hardline finding (which can never be approved).
    pub fn approval_key(&self) -> Option<ApprovalKey> {
        if self.tier == Tier::Hardline {
            return None;
        }
        let mut s = String::from(self.id);
        for w in &self.key {
            s.push(' ');
            s.push_str(&shell_quote(w));
        }
        Some(ApprovalKey(s))
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {}: {} (in `{}`)",
            self.tier, self.id, self.reason, self.matched
        )
    }
}

/// The exact command pattern an approval covers: a rule id followed by the normalized,
/// shell-quoted words that triggered it. Two spellings that the shell runs identically
/// (`'rm' -rf ~` and `rm -rf ~`) share a key; different arguments never do.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApprovalKey(String);

impl ApprovalKey {
    /// The key as a string, for storage.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Rebuilds a key from a stored string (as produced by [`ApprovalKey::as_str`]).
    pub fn from_stored(s: &str) -> Self {
        ApprovalKey(s.to_owned())
    }
}

impl fmt::Display for ApprovalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The guard's answer for one command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Everything found, in the order the shell would reach it.
    pub findings: Vec<Finding>,
    /// Set when the command (or a payload inside it) could not be analysed; a
    /// `parse.unanalysed` finding is then present too, so such a command is never clean.
    pub parse_error: Option<String>,
}

impl Verdict {
    /// True when nothing was found and the whole command was analysed.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty() && self.parse_error.is_none()
    }

    /// True when some finding is hardline: the command must not run, whatever the mode.
    pub fn is_hardline(&self) -> bool {
        self.findings.iter().any(|f| f.tier == Tier::Hardline)
    }

    /// True when the command may run only after approval: something was found, none of it
    /// hardline.
    pub fn needs_approval(&self) -> bool {
        !self.is_clean() && !self.is_hardline()
    }

    /// The highest tier found, or `None` for a clean command.
    pub fn tier(&self) -> Option<Tier> {
        self.findings.iter().map(|f| f.tier).max()
    }

    /// The keys an "always approve" of this command would store, or `None` when the verdict is
    /// hardline and so cannot be approved.
    pub fn approval_keys(&self) -> Option<Vec<ApprovalKey>> {
        self.findings.iter().map(Finding::approval_key).collect()
    }

    /// True when earlier approvals cover every finding (`approved` says whether one key was
    /// approved). Always false for a hardline verdict; true for a clean one.
    pub fn is_covered_by(&self, approved: impl Fn(&ApprovalKey) -> bool) -> bool {
        match self.approval_keys() {
            Some(keys) => keys.iter().all(approved),
            None => false,
        }
    }
}

/// Classifies one shell command line (it may hold pipelines, lists, here-documents and nested
/// `bash -c` payloads). Never panics; never runs anything.
pub fn classify(command: &str) -> Verdict {
    walk::classify(command)
}

/// Quotes a word so the key reads as the shell command it stands for and never has two
/// readings.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:@%+,~^".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardline_verdicts_have_no_approval_keys_and_are_never_covered() {
        let v = classify("rm -rf /");
        assert!(v.is_hardline());
        assert!(!v.needs_approval());
        assert_eq!(v.approval_keys(), None);
        assert!(!v.is_covered_by(|_| true));
    }

    #[test]
    fn clean_verdicts_are_covered_by_nothing_at_all() {
        let v = classify("ls -la");
        assert!(v.is_clean());
        assert_eq!(v.tier(), None);
        assert!(v.is_covered_by(|_| false));
    }

    #[test]
    fn approval_keys_ignore_quoting_but_not_arguments() {
        let a = classify("'git' push \"--force\" origin main");
        let b = classify("git push --force origin main");
        let c = classify("git push --force origin feature");
        assert_eq!(a.approval_keys(), b.approval_keys());
        assert_ne!(b.approval_keys(), c.approval_keys());
    }

    #[test]
    fn a_stored_key_covers_the_same_command_later() {
        let first = classify("chmod -R 777 ./shared");
        let stored: Vec<String> = first
            .approval_keys()
            .unwrap()
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect();
        let again = classify("chmod  -R 777 './shared'");
        assert!(again.is_covered_by(|k| stored.iter().any(|s| ApprovalKey::from_stored(s) == *k)));
        let other = classify("chmod -R 777 ./other");
        assert!(!other.is_covered_by(|k| stored.iter().any(|s| ApprovalKey::from_stored(s) == *k)));
    }

    #[test]
    fn approval_keys_cover_here_document_bodies() {
        let a = classify("python3 - <<EOF\nimport os; os.system('ls')\nEOF");
        let b = classify("python3 - <<EOF\nimport os; os.system('rm -rf ~')\nEOF");
        assert!(a.needs_approval() && b.needs_approval());
        assert_ne!(a.approval_keys(), b.approval_keys());
    }

    #[test]
    fn unparseable_commands_need_approval_and_say_why() {
        let v = classify("echo \"unterminated");
        assert!(v.needs_approval());
        assert!(v.parse_error.is_some());
        assert_eq!(v.findings[0].id, "parse.unanalysed");
    }

    #[test]
    fn key_quoting_keeps_words_apart() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("~/x"), "~/x");
    }
}
