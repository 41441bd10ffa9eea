//! # nestbox-policy
//!
//! What a step may touch, as data. This crate owns the policy types, the TOML file format
//! (DESIGN section 5), the built-in default policy, and the checks that need no I/O. It does
//! not look at the filesystem beyond reading the policy file: resolving paths, checking that
//! they exist and turning them into kernel rules is the cage's job (`nestbox-cage`).
//!
//! ```
//! use nestbox_policy::{parse_policy, Policy, Access};
//!
//! let file = parse_policy("worker.toml", "[fs]\nread = [\"/srv/data\"]\n").unwrap();
//! let policy = Policy::effective(Some(file), Policy::default());
//! assert!(policy.paths(Access::Read).any(|r| r.path == "/srv/data"));
//! assert!(policy.paths(Access::Exec).any(|r| r.path == "/usr")); // from the default
//! ```
//!
//! Every entry remembers its [`Origin`] (file, line and column, a flag, or the default), so a
//! refusal later can say exactly which line to change.
//!
//! The gateway's policy (who may reach where through `nestbox gateway`, and the credentials it
//! holds) lives in [`gateway`], with its own loader and the endpoint-ambiguity check.

mod defaults;
pub mod gateway;
pub mod host;
mod load;
mod model;
pub mod presets;
pub mod proxy_env;
pub mod units;

pub use defaults::{DEFAULT_PROCESSES, default_policy};
pub use host::{
    AddrClass, AddrVerdict, Allowlist, EntryError, Host, HostError, HostPattern, HostRule,
    HostVerdict, IpRange, PortSpec, RequestKind, Rule, RuleSource, parse_authority,
};
pub use load::{PolicyError, check_env_name, load_file, parse_policy};
pub use model::{
    Access, Base, EnvPolicy, Limits, NetEntry, NetMode, NetPolicy, Origin, PathRule, Policy,
};
pub use presets::{PRESETS, Preset, PresetKind, UnknownPreset, find_preset};
