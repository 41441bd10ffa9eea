//! TCP to listeners on this machine, UDP (DNS straight to a resolver), and the socket families
//! the filter refuses (raw, netlink, vsock, MPTCP, SCTP). No network at all without a relay.

use std::net::{TcpListener, UdpSocket};

use crate::common::*;

#[test]
fn step_cannot_connect_to_a_tcp_listener_on_this_machine() {
    let s = Scratch::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    // By default the step has its own network namespace holding only lo: nothing of this
    // machine is there, and nothing outside it is routable.
    assert_eq!(
        s.probe_inside(&[], &["tcp", "127.0.0.1", &port]),
        "ERR ECONNREFUSED"
    );
    assert_eq!(
        s.probe_inside(&[], &["tcp", "203.0.113.80", "443"]),
        "ERR ENETUNREACH"
    );
    // In port mode the step shares the machine's network and Landlock refuses the connect.
    let port_mode = ["--net-mode", "port", "--allow", "127.0.0.2:9"];
    assert_eq!(
        s.probe_inside(&port_mode, &["tcp", "127.0.0.1", &port]),
        "ERR EACCES"
    );
    assert_eq!(s.probe_outside(&["tcp", "127.0.0.1", &port]), "OK");
}

#[test]
fn in_port_mode_step_cannot_bind_a_tcp_port() {
    let s = Scratch::new();
    let port_mode = ["--net-mode", "port", "--allow", "127.0.0.2:9"];
    assert_eq!(s.probe_inside(&port_mode, &["tcp-bind"]), "ERR EACCES");
    assert_eq!(s.probe_outside(&["tcp-bind"]), "OK");
    // In its own namespace binding is harmless (see the unreachable-listener test below).
    assert_eq!(s.probe_inside(&[], &["tcp-bind"]), "OK");
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

#[test]
fn step_cannot_connect_with_tcp_fast_open() {
    // sendto(MSG_FASTOPEN) connects without the connect() that Landlock checks: the filter
    // refuses it in every network mode.
    let s = Scratch::new();
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for c in server.incoming().flatten() {
            let mut c = c;
            let _ = std::io::Write::write_all(&mut c, b"HTTP/1.0 200 OK\r\n\r\n");
        }
    });
    assert_eq!(
        s.probe_inside(&[], &["tfo", "127.0.0.1", &port]),
        "ERR EPERM"
    );
    assert_eq!(
        s.probe_inside(
            &["--net-mode", "port", "--allow", "127.0.0.2:9"],
            &["tfo", "127.0.0.1", &port]
        ),
        "ERR EPERM"
    );
    assert_eq!(s.probe_outside(&["tfo", "127.0.0.1", &port]), "OK");
}

#[test]
fn where_landlock_governs_tcp_an_unbound_listen_is_refused() {
    // Port mode: TCP is Landlock's, and listen() without bind() would pick a port around it.
    let s = Scratch::new();
    assert_eq!(
        s.probe_inside(
            &["--net-mode", "port", "--allow", "127.0.0.2:9"],
            &["listen-unbound"]
        ),
        "ERR EPERM"
    );
    assert_eq!(s.probe_outside(&["listen-unbound"]), "OK");
}

#[test]
fn a_port_the_step_listens_on_in_its_own_namespace_is_unreachable_from_outside() {
    let s = Scratch::new();
    let mut step = s
        .nestbox(&[], &[PYTHON, "probe.py", "listen-unbound", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(step.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    let port: u16 = first
        .trim()
        .strip_prefix("port ")
        .expect(&first)
        .parse()
        .unwrap();
    let knock = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(
        knock.is_err(),
        "the step's listener must not be reachable from the host"
    );
    let _ = step.kill();
    let _ = step.wait();
}
