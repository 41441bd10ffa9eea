//! Generates the Modal backend's gRPC code from the vendored subset of Modal's API definition
//! (proto/modal), with protox (a pure-Rust .proto compiler): no protoc needed.
//!
//! Two outputs: messages and clients for the library (`modal-client/`), messages and server
//! traits for the test fake (`modal-server/`), so that no server code is built into the library.

fn main() {
    let protos = ["modal/api.proto", "modal/task_command_router.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed=proto/{p}");
    }
    let files = protox::compile(protos, ["proto"]).expect("compiling proto/modal with protox");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    for (dir, server) in [("modal-client", false), ("modal-server", true)] {
        let dir = out.join(dir);
        std::fs::create_dir_all(&dir).expect("creating the generated code's directory");
        tonic_prost_build::configure()
            .build_client(!server)
            .build_server(server)
            .build_transport(false)
            .out_dir(&dir)
            .compile_fds(files.clone())
            .expect("generating the Modal gRPC code");
    }
}
