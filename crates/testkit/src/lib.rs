//! Fixtures shared by the integration tests of several crates: real parts (tinyproxy) and
//! small loopback servers, and a TLS server with its own test CA standing in for an API. Test-only: no library crate depends on this one.

pub mod http;
pub mod tinyproxy;
pub mod tls_api;
