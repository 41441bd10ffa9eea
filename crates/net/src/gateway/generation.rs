//! One loaded policy generation: the validated policy, its secrets, its upstream trust, and the
//! decisions made against it. A generation never changes; a reload builds a new one and swaps
//! it in for new connections, so a connection sees one policy from start to end.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use nestbox_policy::gateway::{GatewayPolicy, GatewayRule, TlsMode, load_gateway_file};
use nestbox_policy::host::classify as classify_addr;
use nestbox_policy::{AddrClass, Host};
use rustls::ClientConfig;

use super::identity::CallerId;
use super::placeholder::Forms;
use super::secret::{Secret, load as load_secret};
use super::tls::{client_config, upstream_trust};
use crate::relay::refusal::Refusal;

/// A loaded, valid policy with everything needed to apply it.
pub(crate) struct Generation {
    /// Counts up from 1 with each successful load.
    pub number: u64,
    /// When it was loaded (RFC 3339).
    pub loaded_at: String,
    /// The policy.
    pub policy: GatewayPolicy,
    secrets: HashMap<String, Secret>,
    /// Client TLS configuration offering HTTP/2 and HTTP/1.1.
    pub client_h2: Arc<ClientConfig>,
    /// Client TLS configuration offering HTTP/1.1 only.
    pub client_h1: Arc<ClientConfig>,
    /// The extra upstream roots, PEM (handed to cells with the gateway CA).
    pub extra_roots_pem: String,
    /// How many system roots were loaded.
    pub system_roots: usize,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Generation({})", self.number)
    }
}

/// What a `CONNECT` was granted.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    /// The rules naming this caller and destination (all agree on `tls` and `http2`).
    pub rules: Vec<usize>,
    /// The TLS handling.
    pub tls: TlsMode,
    /// Offer HTTP/2 to the client (inspect only).
    pub http2: bool,
}

impl Generation {
    /// Loads `path` and reads every credential's secret from `env` or its file. Any failure
    /// refuses the whole generation.
    pub fn load(
        path: &Path,
        number: u64,
        env: &dyn Fn(&str) -> Option<Vec<u8>>,
    ) -> Result<Generation, String> {
        let policy = load_gateway_file(path).map_err(|e| e.to_string())?;
        let mut secrets = HashMap::new();
        for c in &policy.credentials {
            let s = load_secret(c, env).map_err(|e| e.to_string())?;
            secrets.insert(c.name.clone(), s);
        }
        let trust = upstream_trust(&policy.settings.upstream_ca)
            .map_err(|e| format!("{}: gateway.{e}", path.display()))?;
        Ok(Generation {
            number,
            loaded_at: crate::audit::rfc3339(SystemTime::now()),
            client_h2: client_config(trust.roots.clone(), true)?,
            client_h1: client_config(trust.roots, false)?,
            extra_roots_pem: trust.extra_pem,
            system_roots: trust.system_count,
            policy,
            secrets,
        })
    }

    /// The placeholder forms this policy accepts.
    pub fn forms(&self) -> Forms {
        Forms {
            openshell: self.policy.settings.openshell_placeholders,
        }
    }

    /// The rule at `index`.
    pub fn rule(&self, index: usize) -> &GatewayRule {
        &self.policy.rules[index]
    }

    /// Decides a `CONNECT` from `caller` to `host:port`.
    pub(crate) fn admit(
        &self,
        caller: &CallerId,
        host: &Host,
        port: u16,
    ) -> Result<Admission, Refusal> {
        let rules: Vec<usize> = self
            .policy
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| caller.is(&r.caller))
            .filter(|(_, r)| match host {
                Host::Name(n) => r.covers_name(n, port),
                Host::Addr(a) => r.covers_addr(*a, port),
            })
            .map(|(i, _)| i)
            .collect();
        let Some(&first) = rules.first() else {
            return Err(Refusal::no_matching_rule(caller, host, port));
        };
        let r = &self.policy.rules[first];
        Ok(Admission {
            tls: r.tls,
            http2: r.http2,
            rules,
        })
    }

    /// May `addr` (resolved for `host`) be dialed under the admitted rules? Refused classes
    /// (loopback, private, link-local, metadata...) need a rule's `addresses` to name them.
    pub(crate) fn check_addr(
        &self,
        admission: &Admission,
        host: &Host,
        port: u16,
        addr: IpAddr,
    ) -> Result<(), Refusal> {
        let addr = addr.to_canonical();
        let Some(class) = classify_addr(addr) else {
            return Ok(());
        };
        let opened = admission.rules.iter().any(|&i| {
            self.policy.rules[i].addresses.iter().any(|range| {
                range.contains(addr) && (class != AddrClass::Metadata || range.is_single())
            })
        });
        if opened {
            Ok(())
        } else {
            Err(Refusal::gateway_address_refused(host, port, addr, class))
        }
    }

    /// The secret for placeholder `name`, if `caller` may send it to `host:port` `path`.
    pub(crate) fn resolve(
        &self,
        name: &str,
        caller: &CallerId,
        host: &Host,
        port: u16,
        path: &str,
    ) -> Result<&Secret, Refusal> {
        let Some(spec) = self.policy.credential(name) else {
            return Err(Refusal::credential_unknown(name));
        };
        if !spec.endpoints.iter().any(|e| e.covers(host, port, path)) {
            return Err(Refusal::credential_endpoint_mismatch(
                spec, host, port, path,
            ));
        }
        if !spec.callers.iter().any(|c| caller.is(c)) {
            return Err(Refusal::credential_caller_mismatch(spec, caller));
        }
        if let CallerId::Cell { credentials, .. } = caller
            && !credentials.iter().any(|c| c == name)
        {
            return Err(Refusal::credential_not_granted(name, caller));
        }
        self.secrets
            .get(name)
            .ok_or_else(|| Refusal::credential_unknown(name))
    }

    /// Relay allow entries (`host:port`) for what the policy lets cell `name` reach: the
    /// launcher adds them to the cell's relay, so the relay forwards exactly those to the
    /// gateway.
    pub fn cell_endpoints(&self, name: &str) -> Vec<String> {
        let me = CallerId::Cell {
            name: name.to_string(),
            id: String::new(),
            credentials: Vec::new(),
        };
        let mut out = Vec::new();
        for r in &self.policy.rules {
            if !me.is(&r.caller) {
                continue;
            }
            for h in &r.hosts {
                for p in &r.ports {
                    let entry = nestbox_policy::HostRule {
                        pattern: h.pattern.clone(),
                        port: nestbox_policy::PortSpec::Exact(*p),
                    }
                    .to_string();
                    if !out.contains(&entry) {
                        out.push(entry);
                    }
                }
            }
        }
        out
    }

    /// Checks that cell `name` may be given `credential`, for registration.
    pub fn check_grant(&self, name: &str, credential: &str) -> Result<(), String> {
        let me = CallerId::Cell {
            name: name.to_string(),
            id: String::new(),
            credentials: Vec::new(),
        };
        let Some(spec) = self.policy.credential(credential) else {
            let known: Vec<&str> = self
                .policy
                .credentials
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(format!(
                "the gateway policy ({}) defines no credential `{credential}` (it defines: {})",
                self.policy.file,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        };
        if !spec.callers.iter().any(|c| me.is(c)) {
            let callers: Vec<String> = spec.callers.iter().map(|c| c.to_string()).collect();
            return Err(format!(
                "credential `{credential}` ({}) is bound to {}, not to cell `{name}`: add \
                 `{{ cell = \"{name}\" }}` to its callers, or run with --cell-name",
                spec.origin,
                callers.join(", ")
            ));
        }
        Ok(())
    }
}
