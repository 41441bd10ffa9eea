//! The gateway policy: who (a cell, a program, anyone) may reach where (hosts, ports, paths,
//! methods) through `nestbox gateway`, with which TLS handling, and which credentials the
//! gateway puts in place of their placeholders, for which callers and endpoints.
//!
//! ```
//! use nestbox_policy::gateway::{parse_gateway_policy, TlsMode};
//!
//! let policy = parse_gateway_policy("gateway.toml", r#"
//! [[rule]]
//! name = "workers reach the model API"
//! cell = "worker"
//! hosts = ["api.anthropic.com"]
//! tls = "inspect"
//!
//! [[credential]]
//! name = "ANTHROPIC_API_KEY"
//! env = "ANTHROPIC_API_KEY"
//! endpoints = [{ host = "api.anthropic.com", path = "/v1/**" }]
//! callers = [{ cell = "worker" }]
//! "#).unwrap();
//! assert_eq!(policy.rules[0].tls, TlsMode::Inspect);
//! ```
//!
//! Loading never reads secrets: a credential names its source, and the gateway reads it (see
//! `nestbox-net`). Validation ([`validate`](self)) refuses endpoint ambiguity per caller.

mod glob;
mod load;
mod model;
mod validate;

pub use glob::Glob;
pub use load::{PolicyKind, load_gateway_file, parse_gateway_policy, policy_kind};
pub use model::{
    Caller, CredentialEndpoint, CredentialSpec, GatewayPolicy, GatewayRule, GatewaySettings,
    HostEntry, SecretSource, TlsMode,
};
pub use validate::patterns_overlap;
