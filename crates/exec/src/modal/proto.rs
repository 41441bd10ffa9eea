//! The generated gRPC code (messages and clients) for the vendored subset of Modal's API
//! (`crates/exec/proto/modal`), built by `build.rs`.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `modal.client`: the control plane (`ModalClient`).
pub mod client {
    include!(concat!(env!("OUT_DIR"), "/modal-client/modal.client.rs"));
}

/// `modal.task_command_router`: the sandbox's command router (`TaskCommandRouter`).
pub mod router {
    include!(concat!(
        env!("OUT_DIR"),
        "/modal-client/modal.task_command_router.rs"
    ));
}
