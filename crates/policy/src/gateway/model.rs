//! The gateway policy as data: rules (who may reach where, with which TLS handling) and
//! credentials (a secret's source, and the endpoints and callers it is bound to).

use std::fmt;
use std::path::PathBuf;

use super::glob::Glob;
use crate::host::{HostPattern, IpRange};
use crate::model::Origin;

/// Who a rule or a credential names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A cell: a step that nestbox started, known by the token its relay sends. The glob
    /// matches the cell's name (`nestbox run --cell-name`, default `worker`).
    Cell(Glob),
    /// A program that nestbox did not start, known by `/proc/<pid>/exe` of the process that
    /// owns the client socket (never `argv[0]`).
    Program {
        /// Matched against the executable's path.
        exe: Glob,
        /// Also match processes whose ancestor runs a matching executable. Off by default: a
        /// listed agent does not grant what it spawns unless the rule says so.
        descendants: bool,
    },
    /// Every caller.
    Any,
}

impl Caller {
    /// Whether one caller could be named by both `self` and `other`. A connection is either a
    /// cell (it carries a cell token) or a program, never both. A program rule that covers
    /// descendants overlaps every program rule: any executable can be started by the one it
    /// names.
    pub fn overlaps(&self, other: &Caller) -> bool {
        match (self, other) {
            (Caller::Any, _) | (_, Caller::Any) => true,
            (Caller::Cell(a), Caller::Cell(b)) => a.intersects(b),
            (
                Caller::Program {
                    exe: a,
                    descendants: da,
                },
                Caller::Program {
                    exe: b,
                    descendants: db,
                },
            ) => *da || *db || a.intersects(b),
            _ => false,
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Cell(g) => write!(f, "cell `{g}`"),
            Caller::Program {
                exe,
                descendants: false,
            } => write!(f, "program `{exe}`"),
            Caller::Program {
                exe,
                descendants: true,
            } => write!(f, "program `{exe}` and its descendants"),
            Caller::Any => f.write_str("any caller"),
        }
    }
}

/// How the gateway handles an allowed TLS connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// A byte tunnel: the gateway sees the server name, nothing inside. No placeholder can be
    /// resolved in it.
    Passthrough,
    /// The gateway terminates TLS with its own CA, checks each request (path, method) and
    /// resolves placeholders, then speaks TLS to the server, verifying its certificate.
    Inspect,
}

impl TlsMode {
    /// `passthrough` or `inspect`, as written in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Passthrough => "passthrough",
            TlsMode::Inspect => "inspect",
        }
    }
}

/// One host entry of a rule, with where it came from (written, or a preset's expansion).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// The pattern: a name, `*.suffix`, an address or a range.
    pub pattern: HostPattern,
    /// As written, or as the preset lists it.
    pub text: String,
    /// The preset it came from, if any.
    pub preset: Option<String>,
}

/// `[[rule]]`: a caller may reach these hosts on these ports, with this TLS handling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayRule {
    /// Unique name, used in audit lines and messages.
    pub name: String,
    /// Where the rule starts (its `name`).
    pub origin: Origin,
    /// Who.
    pub caller: Caller,
    /// Hosts (written and expanded from presets).
    pub hosts: Vec<HostEntry>,
    /// TCP ports (default 443).
    pub ports: Vec<u16>,
    /// Request path globs (inspect only); empty means every path.
    pub paths: Vec<Glob>,
    /// Request methods, upper case (inspect only); empty means every method.
    pub methods: Vec<String>,
    /// TLS handling.
    pub tls: TlsMode,
    /// Where `tls` was written (or the rule's origin when defaulted).
    pub tls_origin: Origin,
    /// Offer HTTP/2 to the client on an inspected connection (ALPN). Default true.
    pub http2: bool,
    /// Where `http2` was written (or the rule's origin when defaulted).
    pub http2_origin: Origin,
    /// Address ranges this rule may dial although they are loopback, private or link-local
    /// (a service on this machine, a test server). Metadata addresses need an exact entry.
    pub addresses: Vec<IpRange>,
}

impl GatewayRule {
    /// Whether the rule lets `method` and `path` through (both lists empty: everything).
    pub fn admits_request(&self, method: &str, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m == method))
            && (self.paths.is_empty() || self.paths.iter().any(|g| g.matches(path)))
    }

    /// Whether the rule covers `host` (a normalized name) on `port`.
    pub fn covers_name(&self, name: &str, port: u16) -> bool {
        self.ports.contains(&port) && self.hosts.iter().any(|h| h.pattern.matches_name(name))
    }

    /// Whether the rule covers the address literal `addr` on `port`.
    pub fn covers_addr(&self, addr: std::net::IpAddr, port: u16) -> bool {
        self.ports.contains(&port) && self.hosts.iter().any(|h| h.pattern.matches_addr(addr))
    }
}

/// Where a credential's secret comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// A variable of the gateway's own environment.
    Env(String),
    /// A file readable only by the gateway's user (mode `0600` or stricter).
    File(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(name) => write!(f, "environment variable {name}"),
            SecretSource::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

/// One endpoint a credential is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialEndpoint {
    /// Which hosts.
    pub host: HostPattern,
    /// As written.
    pub host_text: String,
    /// Which port (default 443).
    pub port: u16,
    /// Which request paths (default `/**`: all).
    pub path: Glob,
}

impl CredentialEndpoint {
    /// Whether the endpoint covers `host:port` and `path`.
    pub fn covers(&self, host: &crate::Host, port: u16, path: &str) -> bool {
        let host_ok = match host {
            crate::Host::Name(n) => self.host.matches_name(n),
            crate::Host::Addr(a) => self.host.matches_addr(*a),
        };
        host_ok && self.port == port && self.path.matches(path)
    }
}

impl fmt::Display for CredentialEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}{}", self.host_text, self.port, self.path)
    }
}

/// `[[credential]]`: a secret the gateway puts in place of its placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialSpec {
    /// The name in the placeholder (`nestbox:resolve:env:NAME`), an environment variable name.
    pub name: String,
    /// Where the credential starts (its `name`).
    pub origin: Origin,
    /// Where the secret is read from.
    pub source: SecretSource,
    /// Where the secret may be sent.
    pub endpoints: Vec<CredentialEndpoint>,
    /// Who may have it sent.
    pub callers: Vec<Caller>,
}

/// `[gateway]`: settings of the gateway itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Also resolve `openshell:resolve:env:NAME` (for workers written for OpenShell).
    pub openshell_placeholders: bool,
    /// The largest request body the gateway buffers to look for placeholders; a larger body on
    /// an inspected connection is refused (413) before anything is sent.
    pub max_body: u64,
    /// Extra PEM files of roots trusted for upstream servers, besides the system's.
    pub upstream_ca: Vec<PathBuf>,
}

impl Default for GatewaySettings {
    fn default() -> GatewaySettings {
        GatewaySettings {
            openshell_placeholders: false,
            max_body: 8 << 20,
            upstream_ca: Vec::new(),
        }
    }
}

/// A loaded and validated gateway policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayPolicy {
    /// The file it was read from.
    pub file: String,
    /// `[gateway]`.
    pub settings: GatewaySettings,
    /// `[[rule]]`, in the order written.
    pub rules: Vec<GatewayRule>,
    /// `[[credential]]`, in the order written.
    pub credentials: Vec<CredentialSpec>,
    /// Things that are allowed but probably not meant (printed by `nestbox policy check` and
    /// logged by the gateway).
    pub warnings: Vec<String>,
}

impl GatewayPolicy {
    /// The credential called `name`.
    pub fn credential(&self, name: &str) -> Option<&CredentialSpec> {
        self.credentials.iter().find(|c| c.name == name)
    }
}
