//! The threat model, one file per escape class (DESIGN section 6). Each test attacks from
//! inside a real cage and asserts the attack failed with the errno the cage is meant to give,
//! and runs the same probe outside as the control, which must succeed.

#[path = "../common/mod.rs"]
mod common;

mod capabilities;
mod environment;
mod exec_list;
mod fail_closed;
mod file_descriptors;
mod filesystem;
mod kernel_surface;
mod metadata;
mod namespaces;
mod network;
mod processes;
mod syscall_abi;
mod terminal;
mod unix_sockets;
mod unprivileged;
