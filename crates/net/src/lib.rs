//! # nestbox-net
//!
//! The network side of nestbox: **the relay**, the one network exit of a caged step, and **the
//! gateway** ([`gateway`]), the outer egress proxy that holds credentials.
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
//! ## The gateway's checks, in order
//!
//! `nestbox gateway --policy gateway.toml` serves `CONNECT` on loopback for agents and for the
//! relays of cells (`nestbox run --gateway URL`). Deny by default; every refusal is a distinct
//! `X-Nestbox-Denied` reason with a JSON body saying how to allow it.
//!
//! 1. **Request head**: as the relay's (bounded, strict, timed). Only `CONNECT` is served;
//!    absolute-form plain HTTP gets 405 `plain_http_not_supported`.
//! 2. **Who**: a `Proxy-Authorization: Basic base64("cell:" + token)` names a cell registered
//!    over the control socket (a token nobody issued: 403 `cell_token_invalid`). Without one,
//!    the caller is the program owning the client socket: the connection's addresses are looked
//!    up in `/proc/net/tcp{,6}` for the socket inode, `/proc/*/fd` for its owners, and
//!    `/proc/<pid>/exe` for their executables (never `argv[0]`); owners running different
//!    executables are refused (`caller_ambiguous`); an owner the gateway cannot see is
//!    `unknown`, and only `any` rules apply to it.
//! 3. **Rules** ([`nestbox_policy::gateway`]): the rules naming this caller and covering
//!    `host:port` admit the connection (none: 403 `no_matching_rule`). They agree on the TLS
//!    handling: the policy refused to load otherwise (endpoint ambiguity, per caller).
//! 4. **Resolve, check, dial**: as the relay: one lookup (or `--resolve`), every address
//!    checked (loopback, private, link-local, metadata... refused unless the rule's
//!    `addresses` names them), the checked address dialed.
//! 5. **Passthrough**: `200`, then a byte tunnel whose ClientHello must name the `CONNECT` host
//!    (`sni_mismatch`).
//! 6. **Inspect**: TLS to the server first, verified against the system roots and
//!    `gateway.upstream_ca` (502 `upstream_tls_failed` before the `200`); then the client's TLS
//!    is terminated with a leaf from the gateway's CA (HTTP/2 or HTTP/1.1 by ALPN), and each
//!    request is checked: authority equals the tunnel's host (421 `host_mismatch`), no dot
//!    segments (400), method and path among the rules' (403 `request_not_allowed`), every
//!    placeholder in the path, query and header values (Basic credentials decoded) bound to
//!    this endpoint and this caller (403 `credential_unknown`, `credential_endpoint_mismatch`,
//!    `credential_caller_mismatch`, `credential_not_granted`) and replaced by its secret; the
//!    body is buffered up to `gateway.max_body` (413 `body_too_large_to_inspect`) and refused
//!    if it holds a complete placeholder (403 `placeholder_in_body`), all before anything is
//!    sent. The response streams back.
//!
//! Each connection and each inspected request is one audit line (OCSF-like field names;
//! credential names, never values). A new policy (SIGHUP, or the file changing) applies to new
//! connections; an invalid one is refused and the last valid one stays.
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
mod base64;
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
