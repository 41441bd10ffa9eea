//! The allowlist: allow and deny rules with where each came from, and the two questions the
//! relay asks of them (is this host listed? may this resolved address be dialed?).

use std::fmt;
use std::net::IpAddr;

use super::addr::{AddrClass, canonical, classify};
use super::{Host, HostError, HostRule, RequestKind};
use crate::model::{NetEntry, Origin};

/// Where a rule came from, so a decision can name the line, flag or preset to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleSource {
    /// An entry written in a policy file or given as a flag.
    Entry(Origin),
    /// A host a preset expanded to; `via` says how it was found (`default`, `pip config list`,
    /// `/etc/apt/sources.list.d/debian.sources`, ...).
    Preset {
        /// The preset's name (`pypi`, `github`, ...).
        name: String,
        /// How the host was found.
        via: String,
    },
}

impl fmt::Display for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleSource::Entry(origin) => write!(f, "{origin}"),
            RuleSource::Preset { name, via } => write!(f, "preset {name} ({via})"),
        }
    }
}

/// One allow or deny rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The parsed entry.
    pub host: HostRule,
    /// The entry as written, for messages.
    pub text: String,
    /// Where it came from.
    pub source: RuleSource,
}

impl Rule {
    /// Parses `text` into a rule from `source`.
    pub fn parse(text: &str, source: RuleSource) -> Result<Rule, HostError> {
        Ok(Rule {
            host: HostRule::parse(text)?,
            text: text.trim().to_string(),
            source,
        })
    }
}

impl fmt::Display for Rule {
    /// `` `pypi.org` (preset pypi (default)) ``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` ({})", self.text, self.source)
    }
}

/// An entry of the policy that could not be parsed, with its origin.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {error}")]
pub struct EntryError {
    /// Where the entry was written.
    pub origin: Origin,
    /// What is wrong with it.
    pub error: HostError,
}

/// The answer to "is this host on the list?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostVerdict<'a> {
    /// An allow rule covers it and no deny rule does.
    Allowed(&'a Rule),
    /// A deny rule covers it (deny wins over allow).
    Denied(&'a Rule),
    /// No rule covers it.
    NotListed,
}

/// The answer to "may the relay dial this resolved address?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrVerdict<'a> {
    /// A deny rule covers the address.
    Denied(&'a Rule),
    /// The address is in a refused class and no allow rule opens it.
    Refused(AddrClass),
    /// The address is in a refused class, but an allow rule names it or its range.
    Opened(AddrClass, &'a Rule),
    /// An ordinary address.
    Ordinary,
}

/// Allow and deny rules. Empty means nothing is allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlist {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

impl Allowlist {
    /// An empty list: every host is refused.
    pub fn new() -> Allowlist {
        Allowlist::default()
    }

    /// Builds the list from the policy's `allow` and `deny` entries (presets are expanded by the
    /// caller, which may need I/O: see `nestbox-net`).
    pub fn from_entries(allow: &[NetEntry], deny: &[NetEntry]) -> Result<Allowlist, EntryError> {
        let mut list = Allowlist::new();
        let parse = |e: &NetEntry| {
            Rule::parse(&e.text, RuleSource::Entry(e.origin.clone())).map_err(|error| EntryError {
                origin: e.origin.clone(),
                error,
            })
        };
        for e in allow {
            list.allow.push(parse(e)?);
        }
        for e in deny {
            list.deny.push(parse(e)?);
        }
        Ok(list)
    }

    /// Adds an allow rule.
    pub fn allow(&mut self, rule: Rule) {
        self.allow.push(rule);
    }

    /// Adds a deny rule.
    pub fn deny(&mut self, rule: Rule) {
        self.deny.push(rule);
    }

    /// Parses and adds an allow rule.
    pub fn allow_text(&mut self, text: &str, source: RuleSource) -> Result<(), HostError> {
        self.allow.push(Rule::parse(text, source)?);
        Ok(())
    }

    /// Parses and adds a deny rule.
    pub fn deny_text(&mut self, text: &str, source: RuleSource) -> Result<(), HostError> {
        self.deny.push(Rule::parse(text, source)?);
        Ok(())
    }

    /// The allow rules in the order they were added.
    pub fn allowed(&self) -> &[Rule] {
        &self.allow
    }

    /// The deny rules in the order they were added.
    pub fn denied(&self) -> &[Rule] {
        &self.deny
    }

    /// Whether no allow rule exists (so every request is refused).
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// Is `host` on `port` listed for a request of `kind`? Deny rules are checked first. A
    /// name is matched against name rules and an address literal against address rules.
    pub fn check_host(&self, host: &Host, port: u16, kind: RequestKind) -> HostVerdict<'_> {
        let covers = |rule: &Rule, deny: bool| match host {
            Host::Name(n) => rule.host.covers_name(n, port, kind, deny),
            Host::Addr(a) => rule.host.covers_addr(*a, port, kind, deny),
        };
        if let Some(rule) = self.deny.iter().find(|r| covers(r, true)) {
            return HostVerdict::Denied(rule);
        }
        match self.allow.iter().find(|r| covers(r, false)) {
            Some(rule) => HostVerdict::Allowed(rule),
            None => HostVerdict::NotListed,
        }
    }

    /// May the relay dial `addr` (a resolved or literal address) on `port`? Deny rules first;
    /// then an address in a refused class needs an allow entry the user wrote naming it or its
    /// range (for metadata addresses: naming exactly it); preset hosts never open one.
    pub fn check_addr(&self, addr: IpAddr, port: u16, kind: RequestKind) -> AddrVerdict<'_> {
        let addr = canonical(addr);
        if let Some(rule) = self
            .deny
            .iter()
            .find(|r| r.host.covers_addr(addr, port, kind, true))
        {
            return AddrVerdict::Denied(rule);
        }
        let Some(class) = classify(addr) else {
            return AddrVerdict::Ordinary;
        };
        // Only an entry the user wrote opens a refused class: a preset's hosts come from
        // configuration the step's repository may have influenced, so they never do.
        let opener = self.allow.iter().find(|r| {
            matches!(r.source, RuleSource::Entry(_))
                && r.host.covers_addr(addr, port, kind, false)
                && (!class.needs_exact_entry() || r.host.pattern.is_single_addr())
        });
        match opener {
            Some(rule) => AddrVerdict::Opened(class, rule),
            None => AddrVerdict::Refused(class),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &[&str], deny: &[&str]) -> Allowlist {
        let mut l = Allowlist::new();
        for a in allow {
            l.allow_text(a, RuleSource::Entry(Origin::Flag("--allow")))
                .unwrap();
        }
        for d in deny {
            l.deny_text(d, RuleSource::Entry(Origin::Flag("--deny")))
                .unwrap();
        }
        l
    }

    fn host(t: &str) -> Host {
        Host::parse(t).unwrap()
    }

    const C: RequestKind = RequestKind::Connect;

    #[test]
    fn deny_wins_over_allow() {
        let l = list(&["*.example.com", "example.com"], &["bad.example.com"]);
        assert!(matches!(
            l.check_host(&host("bad.example.com"), 443, C),
            HostVerdict::Denied(_)
        ));
        assert!(matches!(
            l.check_host(&host("good.example.com"), 443, C),
            HostVerdict::Allowed(_)
        ));
    }

    #[test]
    fn deny_without_port_covers_every_port() {
        let l = list(&["example.com:*"], &["example.com"]);
        assert!(matches!(
            l.check_host(&host("example.com"), 8443, C),
            HostVerdict::Denied(_)
        ));
    }

    #[test]
    fn allow_without_port_means_the_default_port_only() {
        let l = list(&["example.com"], &[]);
        assert!(matches!(
            l.check_host(&host("example.com"), 443, C),
            HostVerdict::Allowed(_)
        ));
        assert!(matches!(
            l.check_host(&host("example.com"), 22, C),
            HostVerdict::NotListed
        ));
        assert!(matches!(
            l.check_host(&host("example.com"), 80, RequestKind::PlainHttp),
            HostVerdict::Allowed(_)
        ));
    }

    #[test]
    fn names_never_match_address_rules_and_back() {
        let l = list(&["127.0.0.1:*", "localhost"], &[]);
        assert!(matches!(
            l.check_host(&host("127.0.0.1"), 443, C),
            HostVerdict::Allowed(_)
        ));
        let l = list(&["localhost"], &[]);
        assert!(matches!(
            l.check_host(&host("127.0.0.1"), 443, C),
            HostVerdict::NotListed
        ));
    }

    #[test]
    fn address_literals_match_ranges_and_mapped_forms() {
        let l = list(&["10.0.0.0/8:443"], &[]);
        assert!(matches!(
            l.check_host(&host("[::ffff:10.1.2.3]"), 443, C),
            HostVerdict::Allowed(_)
        ));
    }

    #[test]
    fn refused_classes_need_an_allow_rule_for_the_address() {
        let l = list(&["localhost"], &[]);
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            l.check_addr(lo, 443, C),
            AddrVerdict::Refused(AddrClass::Loopback)
        );
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            l.check_addr(mapped, 443, C),
            AddrVerdict::Refused(AddrClass::Loopback)
        );
        let l = list(&["localhost", "127.0.0.0/8"], &[]);
        assert!(matches!(
            l.check_addr(lo, 443, C),
            AddrVerdict::Opened(AddrClass::Loopback, _)
        ));
        assert!(matches!(
            l.check_addr(mapped, 443, C),
            AddrVerdict::Opened(AddrClass::Loopback, _)
        ));
        // the opener's port matters too
        assert_eq!(
            l.check_addr(lo, 8080, C),
            AddrVerdict::Refused(AddrClass::Loopback)
        );
    }

    #[test]
    fn metadata_opens_only_for_an_exact_entry() {
        let md: IpAddr = "169.254.169.254".parse().unwrap();
        let l = list(&["169.254.0.0/16:80"], &[]);
        assert_eq!(
            l.check_addr(md, 80, RequestKind::PlainHttp),
            AddrVerdict::Refused(AddrClass::Metadata)
        );
        let l = list(&["169.254.169.254:80"], &[]);
        assert!(matches!(
            l.check_addr(md, 80, RequestKind::PlainHttp),
            AddrVerdict::Opened(AddrClass::Metadata, _)
        ));
    }

    #[test]
    fn deny_rules_apply_to_resolved_addresses() {
        let l = list(&["example.com"], &["203.0.113.0/24"]);
        let a: IpAddr = "203.0.113.9".parse().unwrap();
        assert!(matches!(l.check_addr(a, 443, C), AddrVerdict::Denied(_)));
        let b: IpAddr = "198.51.100.9".parse().unwrap();
        assert_eq!(l.check_addr(b, 443, C), AddrVerdict::Ordinary);
    }

    #[test]
    fn entries_keep_their_origin_in_errors() {
        let bad = NetEntry {
            text: "*.com".into(),
            origin: Origin::File {
                file: "p.toml".into(),
                line: 3,
                column: 10,
            },
        };
        let e = Allowlist::from_entries(&[bad], &[]).unwrap_err();
        assert!(e.to_string().starts_with("p.toml:3:10: `*.com`"), "{e}");
    }
}
