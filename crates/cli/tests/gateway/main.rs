//! The gateway end to end, as users run it: `nestbox gateway` as its own process, real TLS
//! servers with their own test CA standing in for `api.anthropic.com`, and real clients (curl,
//! Python's urllib) inside real caged steps started with `nestbox run --gateway`. Security tests
//! assert the refusal and its reason (`X-Nestbox-Denied`), each with a control that succeeds.

#[path = "../common/mod.rs"]
mod common;
mod support;

mod chain;
mod credentials;
mod demo;
mod identity;
mod lifecycle;
mod policy;
mod reload;
mod secrets;
mod tls;
