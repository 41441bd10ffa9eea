//! Hosts, host patterns and the network allowlist: which `host:port` a step's relay lets through.
//!
//! An entry is one of
//!
//! | entry | matches |
//! |---|---|
//! | `pypi.org` | exactly that name |
//! | `*.githubusercontent.com` | any name *below* it, never the apex `githubusercontent.com` |
//! | `203.0.113.7`, `[2001:db8::1]` | that address (also written without brackets when no port follows) |
//! | `10.0.0.0/8`, `[fd00::/8]` | every address in the range |
//!
//! optionally followed by `:port` or `:*` (any port). Without a port an allow entry means the
//! port of the request kind: 443 for `CONNECT`, 80 for plain-HTTP forwarding. Without a port a
//! deny entry means every port. Names compare case-insensitively and ignore one trailing dot.
//! Deny entries win over allow entries. A name entry never matches an address and an address
//! entry never matches a name: names are checked before resolution, addresses after.
//!
//! ```
//! use nestbox_policy::{Allowlist, Host, HostVerdict, RequestKind, RuleSource, Origin};
//!
//! let mut list = Allowlist::new();
//! list.allow_text("*.example.com", RuleSource::Entry(Origin::Flag("--allow"))).unwrap();
//! list.deny_text("bad.example.com", RuleSource::Entry(Origin::Flag("--deny"))).unwrap();
//! let api = Host::parse("API.example.com.").unwrap();
//! assert!(matches!(list.check_host(&api, 443, RequestKind::Connect), HostVerdict::Allowed(_)));
//! let apex = Host::parse("example.com").unwrap();
//! assert!(matches!(list.check_host(&apex, 443, RequestKind::Connect), HostVerdict::NotListed));
//! let bad = Host::parse("bad.example.com").unwrap();
//! assert!(matches!(list.check_host(&bad, 443, RequestKind::Connect), HostVerdict::Denied(_)));
//! ```

mod addr;
mod allowlist;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use addr::{AddrClass, IpRange, canonical, classify};
pub use allowlist::{AddrVerdict, Allowlist, EntryError, HostVerdict, Rule, RuleSource};

/// A host or entry that could not be understood, with the text and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{input}`: {reason}")]
pub struct HostError {
    /// The text as given.
    pub input: String,
    /// What is wrong with it, in words a user can act on.
    pub reason: String,
}

impl HostError {
    fn new(input: &str, reason: impl Into<String>) -> HostError {
        HostError {
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

/// Which kind of relay request a target comes from. It decides what an entry without `:port`
/// means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// `CONNECT host:port`: a tunnel, usually TLS. Default port 443.
    Connect,
    /// `GET http://host/...`: plain HTTP forwarded by the relay. Default port 80.
    PlainHttp,
}

impl RequestKind {
    /// The port an allow entry without `:port` stands for.
    pub fn default_port(self) -> u16 {
        match self {
            RequestKind::Connect => 443,
            RequestKind::PlainHttp => 80,
        }
    }
}

/// The port part of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortSpec {
    /// No port written: the request kind's default for an allow entry, any port for a deny entry.
    Default,
    /// `:N`.
    Exact(u16),
    /// `:*`.
    Any,
}

impl PortSpec {
    /// Whether this port part covers `port` for a request of `kind`. `deny` selects the deny
    /// meaning of [`PortSpec::Default`] (every port).
    pub fn covers(self, port: u16, kind: RequestKind, deny: bool) -> bool {
        match self {
            PortSpec::Any => true,
            PortSpec::Exact(p) => p == port,
            PortSpec::Default => deny || port == kind.default_port(),
        }
    }

    fn parse(input: &str, text: &str) -> Result<PortSpec, HostError> {
        if text == "*" {
            return Ok(PortSpec::Any);
        }
        parse_port(text)
            .map(PortSpec::Exact)
            .ok_or_else(|| HostError::new(input, format!("`{text}` is not a TCP port (1-65535)")))
    }
}

/// Parses a decimal TCP port, 1 to 65535, digits only (no sign, no spaces).
pub fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|&p| p != 0)
}

/// A host as a request names it, normalized: a lower-case DNS name without trailing dot, or a
/// canonical IP address (IPv4-mapped IPv6 unwrapped).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name.
    Name(String),
    /// An IP address literal.
    Addr(IpAddr),
}

impl Host {
    /// Parses a host without port: a name, a dotted-quad IPv4 address, or an IPv6 address with
    /// or without brackets. Refuses numeric forms that resolvers would read as IPv4
    /// (`2130706433`, `0x7f.1`, `127.1`), zone ids, and anything that is not a plain ASCII name.
    pub fn parse(text: &str) -> Result<Host, HostError> {
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| HostError::new(text, "unclosed `[` around an IPv6 address"))?;
            return parse_v6(text, inner).map(|a| Host::Addr(canonical(IpAddr::V6(a))));
        }
        if text.contains(':') {
            return parse_v6(text, text).map(|a| Host::Addr(canonical(IpAddr::V6(a))));
        }
        if let Ok(v4) = text.parse::<Ipv4Addr>() {
            return Ok(Host::Addr(IpAddr::V4(v4)));
        }
        normalize_name(text).map(Host::Name)
    }

    /// The name, if this is a name.
    pub fn name(&self) -> Option<&str> {
        match self {
            Host::Name(n) => Some(n),
            Host::Addr(_) => None,
        }
    }

    /// The address, if this is an address literal.
    pub fn addr(&self) -> Option<IpAddr> {
        match self {
            Host::Addr(a) => Some(*a),
            Host::Name(_) => None,
        }
    }
}

impl fmt::Display for Host {
    /// Writes the host as it goes into an authority: IPv6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Addr(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Addr(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

fn parse_v6(input: &str, text: &str) -> Result<Ipv6Addr, HostError> {
    if text.contains('%') {
        return Err(HostError::new(
            input,
            "IPv6 zone ids (`%eth0`) are not supported",
        ));
    }
    text.parse::<Ipv6Addr>()
        .map_err(|_| HostError::new(input, "not a valid IPv6 address"))
}

/// Splits an authority (`host:port`, `[v6]:port`, `host`, `[v6]`) into host and port. An
/// unbracketed IPv6 address is refused: `::1:443` could be an address or an address and a port.
pub fn parse_authority(text: &str) -> Result<(Host, Option<u16>), HostError> {
    if text.is_empty() {
        return Err(HostError::new(text, "empty host"));
    }
    if text.starts_with('[') {
        let close = text
            .find(']')
            .ok_or_else(|| HostError::new(text, "unclosed `[` around an IPv6 address"))?;
        let host = Host::parse(&text[..=close])?;
        let rest = &text[close + 1..];
        if rest.is_empty() {
            return Ok((host, None));
        }
        let port = rest
            .strip_prefix(':')
            .and_then(parse_port)
            .ok_or_else(|| HostError::new(text, "expected `:port` (1-65535) after `]`"))?;
        return Ok((host, Some(port)));
    }
    match text.matches(':').count() {
        0 => Ok((Host::parse(text)?, None)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            let port = parse_port(port).ok_or_else(|| {
                HostError::new(text, format!("`{port}` is not a TCP port (1-65535)"))
            })?;
            Ok((Host::parse(host)?, Some(port)))
        }
        _ => Err(HostError::new(
            text,
            "an IPv6 address with a port must be written in brackets, e.g. `[::1]:443`",
        )),
    }
}

/// Normalizes a DNS name: ASCII only, lower case, one trailing dot removed, labels of 1 to 63
/// characters from `a-z 0-9 - _`, at most 253 characters. A last label that is numeric (`127.1`,
/// `2130706433`, `0x7f`) is refused because resolvers read such names as IPv4 addresses.
pub fn normalize_name(text: &str) -> Result<String, HostError> {
    let trimmed = text.strip_suffix('.').unwrap_or(text);
    if trimmed.is_empty() {
        return Err(HostError::new(text, "empty host name"));
    }
    if !trimmed.is_ascii() {
        return Err(HostError::new(
            text,
            "non-ASCII host name: write the punycode form (`xn--...`)",
        ));
    }
    if trimmed.len() > 253 {
        return Err(HostError::new(text, "host name longer than 253 characters"));
    }
    let name = trimmed.to_ascii_lowercase();
    for label in name.split('.') {
        if label.is_empty() {
            return Err(HostError::new(text, "empty label (`..`) in host name"));
        }
        if label.len() > 63 {
            return Err(HostError::new(text, "label longer than 63 characters"));
        }
        if let Some(bad) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(HostError::new(
                text,
                format!(
                    "character `{}` is not allowed in a host name",
                    bad.escape_default()
                ),
            ));
        }
    }
    let last = name.rsplit('.').next().unwrap_or("");
    if looks_numeric(last) {
        return Err(HostError::new(
            text,
            "numeric host that is not a dotted-quad IPv4 address (resolvers would read it as one)",
        ));
    }
    Ok(name)
}

fn looks_numeric(label: &str) -> bool {
    if label.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match label.strip_prefix("0x") {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// The host part of an entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `pypi.org`: exactly this name.
    Exact(String),
    /// `*.example.com`, stored as `example.com`: names strictly below it.
    Subdomains(String),
    /// One address (canonical).
    Addr(IpAddr),
    /// A CIDR range.
    Range(IpRange),
}

impl HostPattern {
    /// Whether the pattern matches the normalized name `name`.
    pub fn matches_name(&self, name: &str) -> bool {
        match self {
            HostPattern::Exact(n) => n == name,
            HostPattern::Subdomains(suffix) => {
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix.as_str())
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
            }
            HostPattern::Addr(_) | HostPattern::Range(_) => false,
        }
    }

    /// Whether the pattern matches the address `addr` (canonicalized first).
    pub fn matches_addr(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        match self {
            HostPattern::Addr(a) => *a == addr,
            HostPattern::Range(r) => r.contains(addr),
            HostPattern::Exact(_) | HostPattern::Subdomains(_) => false,
        }
    }

    /// Whether the pattern names exactly one address (`203.0.113.7`, or a `/32` or `/128`).
    pub fn is_single_addr(&self) -> bool {
        match self {
            HostPattern::Addr(_) => true,
            HostPattern::Range(r) => r.is_single(),
            _ => false,
        }
    }
}

/// One parsed allow or deny entry: a host pattern and a port part.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostRule {
    /// Which hosts.
    pub pattern: HostPattern,
    /// Which ports.
    pub port: PortSpec,
}

impl HostRule {
    /// Parses an entry (see the module documentation for the forms).
    pub fn parse(text: &str) -> Result<HostRule, HostError> {
        let input = text;
        let text = text.trim();
        if text.is_empty() {
            return Err(HostError::new(input, "empty entry"));
        }
        if text == "*" || text.starts_with("*:") {
            return Err(HostError::new(
                input,
                "`*` would allow every host: name the hosts (or `*.domain`) instead",
            ));
        }
        if text.contains("://") {
            return Err(HostError::new(
                input,
                "write a host (`example.com` or `example.com:8443`), not a URL",
            ));
        }
        let (host, port) = split_entry_port(input, text)?;
        let pattern = parse_pattern(input, host)?;
        Ok(HostRule { pattern, port })
    }

    /// Whether the rule covers name `name` on `port` for a request of `kind`.
    pub fn covers_name(&self, name: &str, port: u16, kind: RequestKind, deny: bool) -> bool {
        self.pattern.matches_name(name) && self.port.covers(port, kind, deny)
    }

    /// Whether the rule covers address `addr` on `port` for a request of `kind`.
    pub fn covers_addr(&self, addr: IpAddr, port: u16, kind: RequestKind, deny: bool) -> bool {
        self.pattern.matches_addr(addr) && self.port.covers(port, kind, deny)
    }
}

impl fmt::Display for HostRule {
    /// Writes the canonical form, which parses back to the same rule.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            HostPattern::Exact(n) => f.write_str(n)?,
            HostPattern::Subdomains(s) => write!(f, "*.{s}")?,
            HostPattern::Addr(IpAddr::V4(a)) => write!(f, "{a}")?,
            HostPattern::Addr(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            HostPattern::Range(r) if r.network().is_ipv4() => write!(f, "{r}")?,
            HostPattern::Range(r) => write!(f, "[{r}]")?,
        }
        match self.port {
            PortSpec::Default => Ok(()),
            PortSpec::Exact(p) => write!(f, ":{p}"),
            PortSpec::Any => f.write_str(":*"),
        }
    }
}

/// Splits `host[:port]` of an entry. Brackets hold IPv6 (optionally with `/len`); an unbracketed
/// text with two or more colons is a bare IPv6 address or range without port.
fn split_entry_port<'a>(input: &str, text: &'a str) -> Result<(&'a str, PortSpec), HostError> {
    if text.starts_with('[') {
        let close = text
            .find(']')
            .ok_or_else(|| HostError::new(input, "unclosed `[` around an IPv6 address"))?;
        let rest = &text[close + 1..];
        let port = match rest {
            "" => PortSpec::Default,
            _ => match rest.strip_prefix(':') {
                Some(p) => PortSpec::parse(input, p)?,
                None => {
                    return Err(HostError::new(input, "expected `:port` after `]`"));
                }
            },
        };
        return Ok((&text[..=close], port));
    }
    match text.matches(':').count() {
        0 => Ok((text, PortSpec::Default)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            Ok((host, PortSpec::parse(input, port)?))
        }
        _ => Ok((text, PortSpec::Default)),
    }
}

fn parse_pattern(input: &str, host: &str) -> Result<HostPattern, HostError> {
    let unbracketed = match host.strip_prefix('[') {
        Some(inner) => Some(inner.strip_suffix(']').unwrap_or(inner)),
        None => None,
    };
    let bare = unbracketed.unwrap_or(host);
    if let Some((addr, len)) = bare.split_once('/') {
        let addr: IpAddr =
            if unbracketed.is_some() || addr.contains(':') {
                IpAddr::V6(parse_v6(input, addr)?)
            } else {
                IpAddr::V4(addr.parse::<Ipv4Addr>().map_err(|_| {
                    HostError::new(input, format!("`{addr}` is not an IPv4 address"))
                })?)
            };
        let len: u8 = len
            .parse()
            .map_err(|_| HostError::new(input, format!("`/{len}` is not a prefix length")))?;
        let range = IpRange::new(addr, len).map_err(|m| HostError::new(input, m))?;
        if range.is_single() {
            return Ok(HostPattern::Addr(range.network()));
        }
        return Ok(HostPattern::Range(range));
    }
    if unbracketed.is_some() || bare.contains(':') {
        return Ok(HostPattern::Addr(canonical(IpAddr::V6(parse_v6(
            input, bare,
        )?))));
    }
    if let Ok(v4) = bare.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Addr(IpAddr::V4(v4)));
    }
    if let Some(suffix) = bare.strip_prefix("*.") {
        let suffix = normalize_name(suffix).map_err(|e| HostError::new(input, e.reason))?;
        if !suffix.contains('.') {
            return Err(HostError::new(
                input,
                "a wildcard needs at least two labels after `*.` (`*.com` is too broad)",
            ));
        }
        return Ok(HostPattern::Subdomains(suffix));
    }
    if bare.contains('*') {
        return Err(HostError::new(
            input,
            "`*` may appear only as a leading `*.` (e.g. `*.example.com`)",
        ));
    }
    let name = normalize_name(bare).map_err(|e| HostError::new(input, e.reason))?;
    Ok(HostPattern::Exact(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(text: &str) -> HostRule {
        HostRule::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(
            Host::parse("PyPI.org.").unwrap(),
            Host::Name("pypi.org".into())
        );
        assert!(Host::parse("a..b").is_err());
        assert!(Host::parse("a b").is_err());
        assert!(Host::parse("ex%41mple.com").is_err());
        assert!(Host::parse("bücher.de").is_err());
        assert!(Host::parse(&"a".repeat(64)).is_err());
        assert!(Host::parse(".").is_err());
    }

    #[test]
    fn numeric_hosts_that_resolvers_read_as_ipv4_are_refused() {
        for t in [
            "2130706433",
            "127.1",
            "0x7f.0.0.1",
            "0x7f000001",
            "1.2.3.04",
        ] {
            assert!(Host::parse(t).is_err(), "{t}");
        }
        assert!(Host::parse("1password.com").is_ok());
        assert!(Host::parse("x.0xcafe.dev").is_ok());
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        let (h, p) = parse_authority("example.com:443").unwrap();
        assert_eq!((h, p), (Host::Name("example.com".into()), Some(443)));
        let (h, p) = parse_authority("[::1]:8443").unwrap();
        assert_eq!(h, Host::Addr("::1".parse().unwrap()));
        assert_eq!(p, Some(8443));
        let (h, _) = parse_authority("[::ffff:127.0.0.1]:443").unwrap();
        assert_eq!(h, Host::Addr("127.0.0.1".parse().unwrap()));
        assert!(parse_authority("::1:443").is_err());
        assert!(parse_authority("[::1]443").is_err());
        assert!(parse_authority("[::1").is_err());
        assert!(parse_authority("[fe80::1%eth0]:443").is_err());
        assert!(parse_authority("example.com:0").is_err());
        assert!(parse_authority("example.com:65536").is_err());
        assert!(parse_authority("example.com:+443").is_err());
        assert!(parse_authority("example.com:").is_err());
        assert!(parse_authority("").is_err());
        assert_eq!(parse_authority("[::1]").unwrap().1, None);
    }

    #[test]
    fn entries_parse_into_patterns_and_ports() {
        assert_eq!(
            rule("pypi.org").pattern,
            HostPattern::Exact("pypi.org".into())
        );
        assert_eq!(rule("pypi.org").port, PortSpec::Default);
        assert_eq!(rule("pypi.org:8443").port, PortSpec::Exact(8443));
        assert_eq!(rule("pypi.org:*").port, PortSpec::Any);
        assert_eq!(
            rule("*.Example.COM.").pattern,
            HostPattern::Subdomains("example.com".into())
        );
        assert_eq!(
            rule("[::1]:8443").pattern,
            HostPattern::Addr("::1".parse().unwrap())
        );
        assert_eq!(
            rule("::1").pattern,
            HostPattern::Addr("::1".parse().unwrap())
        );
        assert_eq!(rule("fd00::/8").port, PortSpec::Default);
        assert_eq!(rule("[fd00::/8]:443").port, PortSpec::Exact(443));
        assert_eq!(rule("10.0.0.0/8:22").port, PortSpec::Exact(22));
        assert_eq!(
            rule("127.0.0.1/32").pattern,
            HostPattern::Addr("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            rule("::ffff:127.0.0.1").pattern,
            HostPattern::Addr("127.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn bad_entries_say_why() {
        for (text, needle) in [
            ("*", "every host"),
            ("*:443", "every host"),
            ("*.com", "too broad"),
            ("a.*.com", "leading"),
            ("https://pypi.org", "not a URL"),
            ("pypi.org:0", "TCP port"),
            ("10.1.0.0/8", "did you mean `10.0.0.0/8`"),
            ("10.0.0.0/40", "longer"),
            ("[::1", "unclosed"),
            ("", "empty"),
        ] {
            let e = HostRule::parse(text).unwrap_err();
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for t in [
            "pypi.org",
            "pypi.org:8443",
            "*.example.com:*",
            "10.0.0.0/8",
            "[::1]:443",
            "[fd00::/8]",
            "203.0.113.7",
        ] {
            assert_eq!(rule(t).to_string(), t);
            assert_eq!(rule(&rule(t).to_string()), rule(t));
        }
    }

    #[test]
    fn wildcard_matches_below_the_apex_only() {
        let r = rule("*.example.com");
        assert!(r.pattern.matches_name("a.example.com"));
        assert!(r.pattern.matches_name("a.b.example.com"));
        assert!(!r.pattern.matches_name("example.com"));
        assert!(!r.pattern.matches_name("badexample.com"));
        assert!(!r.pattern.matches_name("example.com.evil.org"));
    }

    #[test]
    fn default_port_depends_on_request_kind_and_side() {
        let r = rule("pypi.org");
        assert!(r.covers_name("pypi.org", 443, RequestKind::Connect, false));
        assert!(!r.covers_name("pypi.org", 80, RequestKind::Connect, false));
        assert!(r.covers_name("pypi.org", 80, RequestKind::PlainHttp, false));
        assert!(!r.covers_name("pypi.org", 8080, RequestKind::PlainHttp, false));
        assert!(r.covers_name("pypi.org", 8080, RequestKind::PlainHttp, true));
    }

    proptest! {
        #[test]
        fn host_parsers_never_panic(s in "[\\[\\]:./*a-zA-Z0-9%_-]{0,40}|\\PC{0,40}") {
            let _ = parse_authority(&s);
            let _ = Host::parse(&s);
            if let Ok(r) = HostRule::parse(&s) {
                // whatever parses must print back to the same rule
                prop_assert_eq!(HostRule::parse(&r.to_string()).unwrap(), r);
            }
        }

        #[test]
        fn wildcards_never_match_their_apex(label in "[a-z0-9]{1,10}", apex in "[a-z]{1,8}\\.[a-z]{2,5}") {
            let r = HostRule::parse(&format!("*.{apex}")).unwrap();
            prop_assert!(!r.pattern.matches_name(&apex));
            let below = format!("{label}.{apex}");
            prop_assert!(r.pattern.matches_name(&below));
        }
    }
}
