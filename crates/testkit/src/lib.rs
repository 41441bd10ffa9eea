//! Fixtures shared by the integration tests of several crates: real parts (tinyproxy) and
//! small loopback servers. Test-only: no library crate depends on this one.

pub mod http;
pub mod tinyproxy;
