//! TCP to listeners on this machine, UDP (DNS straight to a resolver), and the socket families
//! the filter refuses (raw, netlink, vsock, MPTCP, SCTP). No network at all without a relay.

use std::net::{TcpListener, UdpSocket};

use crate::common::*;

#[test]
fn step_cannot_connect_to_a_tcp_listener_on_this_machine() {
    let s = Scratch::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    assert_eq!(
        s.probe_inside(&[], &["tcp", "127.0.0.1", &port]),
        "ERR EACCES"
    );
    assert_eq!(s.probe_outside(&["tcp", "127.0.0.1", &port]), "OK");
}

#[test]
fn step_cannot_listen_on_a_tcp_port() {
    let s = Scratch::new();
    assert_eq!(s.probe_inside(&[], &["tcp-bind"]), "ERR EACCES");
    assert_eq!(s.probe_outside(&["tcp-bind"]), "OK");
}

#[test]
fn step_cannot_send_udp() {
    let s = Scratch::new();
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sink.local_addr().unwrap().port().to_string();
    assert_eq!(s.probe_inside(&[], &["udp", &port]), "ERR EPERM");
    assert_eq!(s.probe_outside(&["udp", &port]), "OK");
}

#[test]
fn step_cannot_open_raw_netlink_vsock_mptcp_or_sctp_sockets() {
    let s = Scratch::new();
    let cases: &[(&str, i32, i32, i32)] = &[
        ("netlink", libc::AF_NETLINK, libc::SOCK_RAW, 0),
        ("vsock", libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        ("mptcp", libc::AF_INET, libc::SOCK_STREAM, 262),
        ("sctp", libc::AF_INET, libc::SOCK_STREAM, 132),
        ("packet", libc::AF_PACKET, libc::SOCK_RAW, 0),
        ("icmp", libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
    ];
    for &(name, family, kind, proto) in cases {
        let args = [family.to_string(), kind.to_string(), proto.to_string()];
        let probe = ["socket", &args[0], &args[1], &args[2]];
        assert_eq!(s.probe_inside(&[], &probe), "ERR EPERM", "{name}");
    }
    // Control: netlink works outside for anyone.
    let nl = [
        libc::AF_NETLINK.to_string(),
        libc::SOCK_RAW.to_string(),
        "0".to_string(),
    ];
    assert_eq!(s.probe_outside(&["socket", &nl[0], &nl[1], &nl[2]]), "OK");
}
