//! # nestbox-net
//!
//! The network side of nestbox. Today: **the relay**, the one network exit of a caged step.
//!
//! A step's worker gets `HTTPS_PROXY`/`https_proxy` (and the `http_proxy` pair) pointing at its
//! relay, a small HTTP proxy that lives exactly as long as the step. In netns mode the relay's
//! listening socket is created inside the step's network namespace and handed over, so the relay
//! accepts inside the cell and dials outside it; a program that ignores the proxy variables has
//! no route out at all. The relay serves two things and nothing else:
//!
//! * `CONNECT host:port`: a tunnel, for HTTPS and any TLS protocol;
//! * `GET`/`HEAD http://host/path` (absolute form): plain HTTP, as apt and some registries use,
//!   forwarded in origin form with `Host` set to the URL's authority and `Connection: close`.
//!
//! ## The checks, in order
//!
//! 1. **Request head**: read within a time limit (slowloris: 408), request line at most 8 KiB
//!    (414), head at most 32 KiB (431), strict HTTP/1 syntax (400). Other methods and forms: 405,
//!    saying what is supported.
//! 2. **Target**: parsed strictly: bracketed IPv6 (`[::1]:443`), IPv4-mapped IPv6 unwrapped,
//!    numeric host forms a resolver would read as IPv4 (`2130706433`, `0x7f.1`) refused.
//! 3. **Allowlist** ([`nestbox_policy::Allowlist`]): deny entries win; a name must match an allow
//!    entry (`host`, `*.suffix` below the apex, `:port`), an IP literal must match an address or
//!    range entry. Otherwise 403 `host_not_allowed`, `ip_literal_not_allowed` or
//!    `denied_by_rule`.
//! 4. **Tunnel limit**: at most [`Limits::max_tunnels`] at once (503 `too_many_tunnels`).
//! 5. **Resolve once, check every address, dial the checked address**: each address must not
//!    match a deny entry, and loopback, link-local, cloud metadata, unspecified,
//!    multicast/broadcast and private ranges are refused unless an allow entry names the address
//!    or its range (metadata: only the exact address). The relay connects to the address it
//!    checked, never to the name. Failures: 502 (`dns_failed`, `connect_failed`), 504.
//! 6. **Upstream**: with an upstream proxy, the relay opens the tunnel through it (`CONNECT`
//!    with Basic `Proxy-Authorization`; plain HTTP in absolute form). The allowlist was already
//!    enforced; an unreachable upstream is a 502 naming it.
//! 7. **Server name**: in a tunnel, the client's first TLS record is read before anything goes
//!    upstream; a ClientHello whose SNI differs from the `CONNECT` host closes the tunnel
//!    (`sni_mismatch`), a malformed one too (`tls_unreadable`).
//!
//! Each refusal carries `X-Nestbox-Denied: <reason>` and a JSON body
//! `{"error": reason, "detail": ..., "allow": how to allow it}`, and each decision can be
//! appended to an [audit] log as one JSON line.
//!
//! Bytes in a tunnel move with `splice(2)` through a pipe per direction, on one thread: an idle
//! tunnel holds no buffer.
//!
//! ```no_run
//! use nestbox_net::{serve, Lifecycle, RelayConfig};
//! use nestbox_policy::{Allowlist, Origin, RuleSource};
//!
//! let mut allowlist = Allowlist::new();
//! allowlist.allow_text("pypi.org", RuleSource::Entry(Origin::Flag("--allow"))).unwrap();
//! let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//! serve(listener, RelayConfig::new(allowlist), Lifecycle::default()).unwrap();
//! ```

#![warn(missing_docs)]

pub mod audit;
pub mod cell;
mod config;
pub mod gateway;

pub mod registry;
mod relay;
pub mod upstream;

pub use audit::{AuditLog, Decision};
pub use config::{ConfigError, Limits, RelayConfig, StaticHosts, allowlist_from_policy};
pub use relay::sni;
pub use relay::{Lifecycle, ServeError, raise_nofile_limit, serve};
pub use upstream::{NoProxy, Upstream, UpstreamError, upstream_from_env};
