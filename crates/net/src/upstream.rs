//! The upstream proxy the relay chains through when there is one (an outer sandbox's egress
//! proxy, a corporate proxy): its URL, its credentials, and which destinations bypass it.
//!
//! Only `http://[user:pass@]host:port` is understood: the relay speaks `CONNECT` and absolute-form
//! HTTP to the upstream in clear text, as every HTTP proxy client does. Credentials are sent as
//! Basic `Proxy-Authorization` and never printed: [`Upstream`]'s `Display` masks the password.

use std::fmt;

use nestbox_policy::host::{Host, HostError, IpRange, normalize_name, parse_authority};

/// An upstream proxy URL that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("upstream proxy {url}: {reason}")]
pub struct UpstreamError {
    /// The URL with any password masked.
    pub url: String,
    /// What is wrong.
    pub reason: String,
}

/// An upstream HTTP proxy.
#[derive(Clone, PartialEq, Eq)]
pub struct Upstream {
    host: Host,
    port: u16,
    user: Option<String>,
    authorization: Option<String>,
    no_proxy: NoProxy,
}

impl Upstream {
    /// Parses `http://[user[:password]@]host:port[/]`. The port is required: proxy tools disagree
    /// on the default (80, 1080, 3128), and guessing wrong fails far from the cause.
    /// Percent-escapes in user and password are decoded.
    pub fn parse(url: &str) -> Result<Upstream, UpstreamError> {
        let err = |reason: &str| UpstreamError {
            url: mask_password(url),
            reason: reason.to_string(),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(err("expected a URL such as http://proxy.example:3128"));
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(err(&format!(
                "scheme `{scheme}` is not supported: only http:// proxies (CONNECT) are"
            )));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(err("a proxy URL has no path"));
        }
        let (userinfo, authority) = match rest.rsplit_once('@') {
            Some((u, a)) => (Some(u), a),
            None => (None, rest),
        };
        let (host, port) = parse_authority(authority).map_err(|e: HostError| err(&e.reason))?;
        let port = port.ok_or_else(|| err("the port is required (e.g. :3128)"))?;
        let (user, authorization) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, pass) = info.split_once(':').unwrap_or((info, ""));
                let user = percent_decode(user).ok_or_else(|| err("bad %-escape in user"))?;
                let pass = percent_decode(pass).ok_or_else(|| err("bad %-escape in password"))?;
                let token = crate::base64::encode(format!("{user}:{pass}").as_bytes());
                (Some(user), Some(format!("Basic {token}")))
            }
        };
        Ok(Upstream {
            host,
            port,
            user,
            authorization,
            no_proxy: NoProxy::default(),
        })
    }

    /// Sets the destinations that bypass the upstream (from `NO_PROXY`).
    pub fn with_no_proxy(mut self, no_proxy: NoProxy) -> Upstream {
        self.no_proxy = no_proxy;
        self
    }

    /// The proxy's host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The value for `Proxy-Authorization`, when the URL carried credentials.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// The destinations that bypass the upstream.
    pub fn no_proxy(&self) -> &NoProxy {
        &self.no_proxy
    }

    /// Whether a request to `host:port` goes through this upstream (not excluded by NO_PROXY).
    pub fn applies_to(&self, host: &Host, port: u16) -> bool {
        !self.no_proxy.matches(host, port)
    }
}

impl fmt::Display for Upstream {
    /// `http://user:***@host:port`: never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("http://")?;
        if let Some(user) = &self.user {
            write!(f, "{user}:***@")?;
        }
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Upstream({self})")
    }
}

/// Replaces the password of a URL with `***` for messages.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((info, host)) => {
            let user = info.split_once(':').map_or(info, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_string(),
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Destinations that bypass the upstream, read from `NO_PROXY` the way curl reads it: `*` means
/// every host; otherwise comma- or space-separated entries, each a name (matching itself and
/// every name below it; a leading `.` is ignored), an IP address or a CIDR range, optionally with
/// `:port`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoProxy {
    everything: bool,
    entries: Vec<(NoProxyHost, Option<u16>)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum NoProxyHost {
    Name(String),
    Range(IpRange),
}

impl NoProxy {
    /// Parses a `NO_PROXY` value. Entries that cannot be understood are skipped, as curl does.
    pub fn parse(text: &str) -> NoProxy {
        let mut out = NoProxy::default();
        for item in text.split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
            if item == "*" {
                out.everything = true;
                continue;
            }
            let item = item.strip_prefix('.').unwrap_or(item);
            let item = item.strip_prefix("*.").unwrap_or(item);
            if let Some(entry) = parse_no_proxy_item(item) {
                out.entries.push(entry);
            }
        }
        out
    }

    /// Whether the list is empty (nothing bypasses the upstream).
    pub fn is_empty(&self) -> bool {
        !self.everything && self.entries.is_empty()
    }

    /// Whether `host:port` bypasses the upstream.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.everything {
            return true;
        }
        self.entries.iter().any(|(h, p)| {
            p.is_none_or(|p| p == port)
                && match (h, host) {
                    (NoProxyHost::Name(n), Host::Name(name)) => {
                        name == n
                            || (name.len() > n.len()
                                && name.ends_with(n.as_str())
                                && name.as_bytes()[name.len() - n.len() - 1] == b'.')
                    }
                    (NoProxyHost::Range(r), Host::Addr(a)) => r.contains(*a),
                    _ => false,
                }
        })
    }
}

fn parse_no_proxy_item(item: &str) -> Option<(NoProxyHost, Option<u16>)> {
    if let Some((addr, len)) = item.split_once('/') {
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        let range = IpRange::new(addr.parse().ok()?, len.parse().ok()?).ok()?;
        return Some((NoProxyHost::Range(range), None));
    }
    if let Ok(a) = item.parse::<std::net::IpAddr>() {
        let bits = if a.is_ipv4() { 32 } else { 128 };
        return Some((NoProxyHost::Range(IpRange::new(a, bits).ok()?), None));
    }
    let (host, port) = parse_authority(item).ok()?;
    let entry = match host {
        Host::Name(n) => NoProxyHost::Name(normalize_name(&n).ok()?),
        Host::Addr(a) => {
            let bits = if a.is_ipv4() { 32 } else { 128 };
            NoProxyHost::Range(IpRange::new(a, bits).ok()?)
        }
    };
    Some((entry, port))
}

/// Picks the upstream from an environment the way the step's own tools would: `https_proxy`,
/// then `HTTPS_PROXY`, then `all_proxy`, then `ALL_PROXY` (lower case first, as curl does; empty
/// values count as unset), with `no_proxy`/`NO_PROXY` as the bypass list. `http_proxy` is not
/// consulted: the relay's traffic is mostly CONNECT, and a proxy set only for plain HTTP is often
/// a different (caching) proxy.
///
/// A socks or https URL is an error rather than being ignored: silently dialing direct when the
/// caller expected a proxy would be a fallback nobody asked for.
pub fn upstream_from_env<F>(lookup: F) -> Result<Option<Upstream>, UpstreamError>
where
    F: Fn(&str) -> Option<String>,
{
    let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let Some(url) = ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .find_map(|n| get(n))
    else {
        return Ok(None);
    };
    let no_proxy = get("no_proxy")
        .or_else(|| get("NO_PROXY"))
        .map(|v| NoProxy::parse(&v))
        .unwrap_or_default();
    Upstream::parse(url.trim()).map(|u| Some(u.with_no_proxy(no_proxy)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn urls_parse_with_and_without_credentials() {
        let u = Upstream::parse("http://127.0.0.1:3128").unwrap();
        assert_eq!(u.port(), 3128);
        assert_eq!(u.authorization(), None);
        assert_eq!(u.to_string(), "http://127.0.0.1:3128");
        let u = Upstream::parse("http://al%40ice:s3cr%3At@proxy.corp:8080/").unwrap();
        assert_eq!(u.host(), &Host::Name("proxy.corp".into()));
        // "al@ice:s3cr:t"
        assert_eq!(u.authorization(), Some("Basic YWxAaWNlOnMzY3I6dA=="));
        assert_eq!(u.to_string(), "http://al@ice:***@proxy.corp:8080");
        let u = Upstream::parse("http://[::1]:3128").unwrap();
        assert_eq!(u.to_string(), "http://[::1]:3128");
    }

    #[test]
    fn unusable_urls_are_errors_without_the_password() {
        for (url, needle) in [
            ("socks5://h:1080", "not supported"),
            ("https://h:443", "not supported"),
            ("http://h", "port is required"),
            ("http://u:hunter2@h", "port is required"),
            ("h:3128", "expected a URL"),
            ("http://h:3128/path", "no path"),
        ] {
            let e = Upstream::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(crate::base64::encode(i.as_bytes()), o);
        }
    }

    #[test]
    fn environment_prefers_lower_case_https_proxy() {
        let u = upstream_from_env(env(&[
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(u.port(), 2);
        let u = upstream_from_env(env(&[("https_proxy", ""), ("ALL_PROXY", "http://all:3")]))
            .unwrap()
            .unwrap();
        assert_eq!(u.port(), 3);
        assert!(
            upstream_from_env(env(&[("http_proxy", "http://h:1")]))
                .unwrap()
                .is_none()
        );
        assert!(upstream_from_env(env(&[("https_proxy", "socks5://h:1")])).is_err());
    }

    #[test]
    fn no_proxy_matches_names_suffixes_addresses_and_ports() {
        let np = NoProxy::parse("localhost, .corp.example,10.0.0.0/8 ,192.0.2.1,svc.test:8080");
        let name = |n: &str| Host::parse(n).unwrap();
        assert!(np.matches(&name("localhost"), 443));
        assert!(np.matches(&name("corp.example"), 443));
        assert!(np.matches(&name("git.corp.example"), 443));
        assert!(!np.matches(&name("notcorp.example"), 443));
        assert!(np.matches(&name("10.1.2.3"), 443));
        assert!(np.matches(&name("192.0.2.1"), 443));
        assert!(!np.matches(&name("192.0.2.2"), 443));
        assert!(np.matches(&name("svc.test"), 8080));
        assert!(!np.matches(&name("svc.test"), 443));
        assert!(NoProxy::parse("*").matches(&name("anything.example"), 1));
        assert!(NoProxy::parse("").is_empty());
    }

    #[test]
    fn environment_no_proxy_is_attached() {
        let u = upstream_from_env(env(&[
            ("https_proxy", "http://p:3128"),
            ("NO_PROXY", "internal.example"),
        ]))
        .unwrap()
        .unwrap();
        assert!(!u.applies_to(&Host::parse("internal.example").unwrap(), 443));
        assert!(u.applies_to(&Host::parse("pypi.org").unwrap(), 443));
    }
}
