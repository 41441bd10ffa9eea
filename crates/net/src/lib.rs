//! # nestbox-net
//!
//! The network side of nestbox (the relay is being built here): the upstream proxy a relay
//! chains through, preset expansion on this machine, and the audit log of relay decisions.

pub mod audit;
pub mod registry;
pub mod upstream;

pub use audit::{AuditLog, Decision};
pub use upstream::{NoProxy, Upstream, UpstreamError, upstream_from_env};
