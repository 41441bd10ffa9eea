//! Pathname and abstract unix sockets: the way to an agent's API socket, docker.sock or a
//! session bus. Refused by the seccomp filter (no AF_UNIX sockets at all; socketpair stays).

use std::os::unix::net::UnixListener;

use crate::common::*;

#[test]
fn step_cannot_connect_to_a_pathname_unix_socket() {
    let s = Scratch::new();
    // Inside the working directory, where Landlock alone would not stop it (ABI < 9).
    let path = s.path().join("agent.sock");
    let _listener = UnixListener::bind(&path).unwrap();
    let p = path.to_str().unwrap();
    assert_eq!(s.probe_inside(&[], &["unix", p]), "ERR EPERM");
    assert_eq!(s.probe_outside(&["unix", p]), "OK");
}

#[test]
fn step_cannot_connect_to_an_abstract_unix_socket() {
    use std::os::linux::net::SocketAddrExt;
    let s = Scratch::new();
    let name = format!("nestbox-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = UnixListener::bind_addr(&addr).unwrap();
    assert_eq!(s.probe_inside(&[], &["abstract", &name]), "ERR EPERM");
    assert_eq!(s.probe_outside(&["abstract", &name]), "OK");
}

#[test]
fn step_keeps_socketpair_for_its_own_plumbing() {
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["socketpair"]), "OK");
}
