//! What one relay enforces: the allowlist, the upstream, limits, the audit log; and how it is
//! built from a step's `[net]` policy.

use std::net::IpAddr;
use std::time::Duration;

use nestbox_policy::{
    Allowlist, EntryError, NetPolicy, Origin, Rule, RuleSource, UnknownPreset, find_preset,
};

use crate::audit::AuditLog;
use crate::registry::{self, Discovery};
use crate::upstream::{Upstream, UpstreamError};

/// Bounds on what one client may make the relay hold or wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line, in bytes (longer: 414).
    pub max_request_line: usize,
    /// Largest request head, in bytes (larger: 431).
    pub max_head: usize,
    /// Time from accepting a connection to its complete request head (slower: 408). The same
    /// bound applies to completing a ClientHello once it started.
    pub head_timeout: Duration,
    /// Time to resolve and connect, directly or through the upstream (slower: 504).
    pub connect_timeout: Duration,
    /// Open tunnels and fetches at once (more: 503 `too_many_tunnels`).
    pub max_tunnels: usize,
    /// Connections still sending their request head at once; more are closed unanswered.
    pub max_pending: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request_line: 8 * 1024,
            max_head: 32 * 1024,
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_tunnels: 512,
            max_pending: 128,
        }
    }
}

/// Names the relay answers itself instead of asking DNS (`--resolve host=addr`): pinned hosts,
/// and names for test servers. The answers are checked like any resolved address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaticHosts {
    entries: Vec<(String, Vec<IpAddr>)>,
}

impl StaticHosts {
    /// Adds `name` answering with `addrs` (replacing an earlier entry for the same name).
    pub fn insert(&mut self, name: &str, addrs: Vec<IpAddr>) -> Result<(), String> {
        let name = nestbox_policy::host::normalize_name(name).map_err(|e| e.to_string())?;
        if addrs.is_empty() {
            return Err(format!("`{name}`: no addresses"));
        }
        self.entries.retain(|(n, _)| *n != name);
        self.entries.push((name, addrs));
        Ok(())
    }

    /// Parses and adds `host=addr[,addr...]` (IPv6 with or without brackets).
    pub fn add(&mut self, text: &str) -> Result<(), String> {
        let (name, list) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}`: expected host=address[,address...]"))?;
        let mut addrs = Vec::new();
        for a in list.split(',') {
            let a = a.trim().trim_start_matches('[').trim_end_matches(']');
            let ip: IpAddr = a
                .parse()
                .map_err(|_| format!("`{text}`: `{a}` is not an IP address"))?;
            addrs.push(ip);
        }
        self.insert(name, addrs)
    }

    /// The addresses for `name` (already normalized), if it is listed.
    pub fn get(&self, name: &str) -> Option<&[IpAddr]> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.as_slice())
    }
}

/// Everything one relay enforces.
#[derive(Debug)]
pub struct RelayConfig {
    /// Which targets are let through.
    pub allowlist: Allowlist,
    /// The proxy to chain through, if any.
    pub upstream: Option<Upstream>,
    /// The step this relay serves, written into every audit line.
    pub step_id: Option<String>,
    /// Where decisions are logged, if anywhere.
    pub audit: Option<AuditLog>,
    /// Size and time bounds.
    pub limits: Limits,
    /// Names answered without DNS.
    pub hosts: StaticHosts,
}

impl RelayConfig {
    /// A configuration enforcing `allowlist` with default limits, no upstream and no audit log.
    pub fn new(allowlist: Allowlist) -> RelayConfig {
        RelayConfig {
            allowlist,
            upstream: None,
            step_id: None,
            audit: None,
            limits: Limits::default(),
            hosts: StaticHosts::default(),
        }
    }

    /// Builds the configuration for a step's `[net]` policy: allow and deny entries, presets
    /// expanded on this machine (see [`registry`]), and the policy's upstream if it names one.
    /// Choosing an upstream from the environment is left to the caller
    /// ([`crate::upstream_from_env`]), which knows whether the user asked for it.
    pub fn from_policy(net: &NetPolicy, discovery: &Discovery) -> Result<RelayConfig, ConfigError> {
        let allowlist = allowlist_from_policy(net, discovery)?;
        let upstream = match &net.upstream {
            Some(entry) => {
                Some(
                    Upstream::parse(&entry.text).map_err(|error| ConfigError::Upstream {
                        origin: entry.origin.clone(),
                        error,
                    })?,
                )
            }
            None => None,
        };
        let mut config = RelayConfig::new(allowlist);
        config.upstream = upstream;
        Ok(config)
    }
}

/// A `[net]` policy the relay cannot be configured from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An allow or deny entry that does not parse.
    #[error(transparent)]
    Entry(#[from] EntryError),
    /// A preset name that does not exist.
    #[error("{origin}: {error}")]
    Preset {
        /// Where the preset was named.
        origin: Origin,
        /// The unknown name and the known ones.
        error: UnknownPreset,
    },
    /// An unusable upstream URL.
    #[error("{origin}: {error}")]
    Upstream {
        /// Where the upstream was given.
        origin: Origin,
        /// What is wrong with it.
        error: UpstreamError,
    },
}

/// The allowlist for a `[net]` policy: its allow and deny entries plus every named preset,
/// expanded on this machine.
pub fn allowlist_from_policy(
    net: &NetPolicy,
    discovery: &Discovery,
) -> Result<Allowlist, ConfigError> {
    let mut list = Allowlist::from_entries(&net.allow, &net.deny)?;
    let mut presets = Vec::new();
    for entry in &net.presets {
        let preset = find_preset(entry.text.trim()).map_err(|error| ConfigError::Preset {
            origin: entry.origin.clone(),
            error,
        })?;
        if !presets.contains(&preset) {
            presets.push(preset);
        }
    }
    for expansion in registry::expand_all(&presets, discovery) {
        let preset = expansion.preset;
        for found in expansion.hosts {
            list.allow(Rule {
                text: found.rule.to_string(),
                host: found.rule,
                source: RuleSource::Preset {
                    name: preset.name.to_string(),
                    via: found.via,
                },
            });
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nestbox_policy::{HostVerdict, NetEntry, RequestKind, host::Host};

    fn entry(text: &str) -> NetEntry {
        NetEntry {
            text: text.into(),
            origin: Origin::Flag("--preset"),
        }
    }

    #[test]
    fn presets_and_entries_build_one_allowlist() {
        let net = NetPolicy {
            allow: vec![entry("example.com")],
            presets: vec![entry("github")],
            ..NetPolicy::default()
        };
        let list = allowlist_from_policy(&net, &Discovery::offline()).unwrap();
        let gh = Host::parse("api.github.com").unwrap();
        match list.check_host(&gh, 443, RequestKind::Connect) {
            HostVerdict::Allowed(rule) => {
                assert_eq!(
                    rule.to_string(),
                    "`api.github.com` (preset github (built in))"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_presets_name_the_known_ones_and_the_origin() {
        let net = NetPolicy {
            presets: vec![entry("pip")],
            ..NetPolicy::default()
        };
        let e = allowlist_from_policy(&net, &Discovery::offline()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("flag --preset: unknown preset `pip`"),
            "{text}"
        );
        assert!(text.contains("pypi"), "{text}");
    }

    #[test]
    fn static_hosts_parse() {
        let mut h = StaticHosts::default();
        h.add("Svc.Test=127.0.0.1,[::1]").unwrap();
        assert_eq!(h.get("svc.test").unwrap().len(), 2);
        h.add("m.test=::ffff:127.0.0.1").unwrap();
        assert_eq!(
            h.get("m.test").unwrap(),
            &["::ffff:127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        assert!(h.add("x.test").is_err());
        assert!(h.add("x.test=nope").is_err());
    }
}
