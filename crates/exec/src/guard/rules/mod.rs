//! The rule families. Each looks at one [`Invocation`] (a simple command with its wrappers
//! peeled off) and reports what it finds; none of them sees raw text, so none of them can be
//! fooled by quoting or matched by a string inside `grep "..."`.

pub(crate) mod container;
pub(crate) mod delete;
pub(crate) mod disk;
pub(crate) mod exec;
pub(crate) mod git;
pub(crate) mod perms;
pub(crate) mod process;
pub(crate) mod system;
pub(crate) mod writes;

use super::command::{Invocation, Site};
use super::{Finding, Tier};

/// A rule's identity: the stable id, its tier and the reason shown to a human.
#[derive(Debug)]
pub(crate) struct Rule {
    pub id: &'static str,
    pub tier: Tier,
    pub reason: &'static str,
}

/// Collects findings, dropping exact repeats (the same rule on the same text).
#[derive(Debug, Default)]
pub(crate) struct Sink {
    pub findings: Vec<Finding>,
}

impl Sink {
    /// Reports `rule` for `site`.
    pub fn hit(&mut self, rule: &Rule, site: &Site) {
        self.hit_with(rule, rule.reason.to_owned(), site);
    }

    /// Reports `rule` for `site` with a reason more specific than the rule's own.
    pub fn hit_with(&mut self, rule: &Rule, reason: String, site: &Site) {
        let dup = self
            .findings
            .iter()
            .any(|f| f.id == rule.id && f.matched == site.text);
        if dup {
            return;
        }
        self.findings.push(Finding {
            id: rule.id,
            tier: rule.tier,
            reason,
            matched: site.text.clone(),
            key: site.key.clone(),
        });
    }
}

/// Runs every rule family on one invocation.
pub(crate) fn check(inv: &Invocation, sink: &mut Sink) {
    let program = inv.program();
    writes::check(program.as_deref(), inv, sink);
    disk::check_writes(program.as_deref(), inv, sink);
    let Some(p) = program.as_deref() else {
        return;
    };
    delete::check(p, inv, sink);
    disk::check(p, inv, sink);
    process::check(p, inv, sink);
    perms::check(p, inv, sink);
    git::check(p, inv, sink);
    system::check(p, inv, sink);
    container::check(p, inv, sink);
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::guard::{Tier, classify};

    /// The ids a command triggers.
    pub fn ids(cmd: &str) -> Vec<&'static str> {
        classify(cmd).findings.iter().map(|f| f.id).collect()
    }

    /// Asserts `cmd` triggers `id` at `tier`.
    pub fn assert_finds(cmd: &str, id: &str, tier: Tier) {
        let v = classify(cmd);
        assert!(
            v.findings.iter().any(|f| f.id == id && f.tier == tier),
            "expected {id} ({tier}) for {cmd:?}, got {:?}",
            v.findings
        );
    }

    /// Asserts `cmd` is clean.
    pub fn assert_clean(cmd: &str) {
        let v = classify(cmd);
        assert!(v.is_clean(), "expected clean for {cmd:?}, got {v:?}");
    }
}
