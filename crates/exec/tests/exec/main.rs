//! Integration tests of the exec layer against real parts: the cage (`nestbox run`), real
//! dockerd and Podman, a real sshd on 127.0.0.1, and (the one exception) a stand-in
//! `apptainer` executable, since Apptainer cannot be installed here.
//!
//! The services are started by `scripts/test.sh` (through `scripts/services/*.sh`); a test
//! that needs one and does not find it FAILS and says how to start it. Nothing is skipped.

mod common;

mod apptainer;
mod docker;
mod local;
mod never_fall_back;
mod ssh;
