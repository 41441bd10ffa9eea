//! A hand-built TLS 1.3 ClientHello, as a client would send it into a CONNECT tunnel.

fn u16be(n: usize) -> [u8; 2] {
    (n as u16).to_be_bytes()
}

/// One TLS record holding a ClientHello that names `server_name` (none when `None`).
pub fn client_hello(server_name: Option<&str>) -> Vec<u8> {
    let mut extensions = Vec::new();
    if let Some(name) = server_name {
        let name = name.as_bytes();
        let entry = [&[0u8][..], &u16be(name.len()), name].concat(); // host_name
        let list = [&u16be(entry.len())[..], &entry].concat();
        extensions.extend_from_slice(&[0x00, 0x00]); // server_name
        extensions.extend_from_slice(&u16be(list.len()));
        extensions.extend_from_slice(&list);
    }
    // supported_versions: TLS 1.3
    extensions.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    // supported_groups: x25519
    extensions.extend_from_slice(&[0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x1d]);

    let mut body = vec![0x03, 0x03]; // legacy_version TLS 1.2
    body.extend_from_slice(&[0x5a; 32]); // random
    body.push(0); // empty legacy session id
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    body.extend_from_slice(&u16be(extensions.len()));
    body.extend_from_slice(&extensions);

    let mut handshake = vec![0x01]; // ClientHello
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);

    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&u16be(handshake.len()));
    record.extend_from_slice(&handshake);
    record
}
