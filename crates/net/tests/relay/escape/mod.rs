//! One file per way of getting past the relay, each trying it and failing, beside a control
//! that shows the same probe works when it should.

mod deny_wins;
mod host_not_allowed;
mod ip_literal;
mod ipv6_literal;
mod loopback_name;
mod mapped_ipv6;
mod max_tunnels;
mod metadata;
mod methods;
mod oversized_head;
mod request_line;
mod slowloris;
mod sni_mismatch;
mod this_host;
mod wildcard_apex;
