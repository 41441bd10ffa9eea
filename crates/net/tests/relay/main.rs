//! Integration tests of the relay, on loopback only. `escape/` holds one file per bypass class
//! (DESIGN section 6), each with its control case: the same probe succeeding when the target is
//! allowed, or without the relay.

mod support;

mod audit;
mod escape;
mod forwarding;
mod lifecycle;
mod upstream;
