//! Reading the server name (SNI) from the first bytes a client sends into a tunnel, so the relay
//! can refuse a tunnel opened to one host that carries a TLS session for another (domain
//! fronting: `CONNECT allowed.example:443`, then a ClientHello for `other.example` served by the
//! same CDN).
//!
//! The parser is bounds-checked everywhere, never panics (a proptest feeds it noise), and reads
//! only what it needs: TLS records (RFC 8446 section 5.1), the ClientHello (section 4.1.2) and
//! the `server_name` extension (RFC 6066 section 3). A ClientHello split across several records
//! is reassembled, up to [`MAX_HELLO`] bytes.

use std::borrow::Cow;

use nestbox_policy::Host;

/// The most bytes the relay buffers while waiting for a complete ClientHello. Real ones are
/// 0.5 to 2 KiB (post-quantum key shares included); anything near this limit is refused.
pub const MAX_HELLO: usize = 32 * 1024;

const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: u16 = 0;
const HOST_NAME: u8 = 0;
/// RFC 8446 5.1: a record's plaintext is at most 2^14 bytes.
const MAX_RECORD: usize = 1 << 14;

/// What the first bytes of a tunnel are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// Not a TLS handshake (plain TCP, SSH, ...): there is no server name to check.
    NotTls,
    /// A complete ClientHello, with the server name it asks for, if any.
    ClientHello {
        /// The `server_name` host name, normalized (lower case, no trailing dot).
        server_name: Option<Host>,
    },
    /// A TLS handshake that is malformed or too large. Refused: a server might read it
    /// differently than this parser did.
    Malformed(&'static str),
}

/// Looks at the bytes a client sent so far. Call again with more bytes after
/// [`Hello::NeedMore`].
pub fn inspect(buf: &[u8]) -> Hello {
    match buf {
        [] => return Hello::NeedMore,
        [first, ..] if *first != HANDSHAKE => return Hello::NotTls,
        [_] => return Hello::NeedMore,
        [_, major, ..] if *major != 3 => return Hello::NotTls,
        _ => {}
    }
    let mut message: Cow<'_, [u8]> = Cow::Borrowed(&[]);
    let mut pos = 0;
    loop {
        let Some(header) = buf.get(pos..pos + 5) else {
            return need_more(buf.len());
        };
        if header[0] != HANDSHAKE {
            return Hello::Malformed("a non-handshake record arrived before the ClientHello ended");
        }
        if header[1] != 3 {
            return Hello::Malformed("a record version is not 3.x");
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 {
            return Hello::Malformed("an empty handshake record");
        }
        if len > MAX_RECORD {
            return Hello::Malformed("a record longer than 2^14 bytes");
        }
        let Some(fragment) = buf.get(pos + 5..pos + 5 + len) else {
            return need_more(pos + 5 + len);
        };
        pos += 5 + len;
        if message.is_empty() {
            message = Cow::Borrowed(fragment);
        } else {
            message.to_mut().extend_from_slice(fragment);
        }
        if message[0] != CLIENT_HELLO {
            return Hello::Malformed("the first handshake message is not a ClientHello");
        }
        if message.len() < 4 {
            continue;
        }
        let body_len = u24(&message[1..4]);
        if body_len + 4 > MAX_HELLO {
            return Hello::Malformed("the ClientHello is larger than the relay accepts");
        }
        match message.len().cmp(&(body_len + 4)) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Greater => {
                return Hello::Malformed("bytes follow the ClientHello inside its record");
            }
            std::cmp::Ordering::Equal => {
                return match client_hello(&message[4..]) {
                    Ok(server_name) => Hello::ClientHello { server_name },
                    Err(why) => Hello::Malformed(why),
                };
            }
        }
    }
}

fn need_more(wanted: usize) -> Hello {
    if wanted > MAX_HELLO + 5 * 8 {
        Hello::Malformed("the ClientHello is larger than the relay accepts")
    } else {
        Hello::NeedMore
    }
}

fn u24(b: &[u8]) -> usize {
    (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2])
}

/// A cursor over a byte slice whose every read is checked.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(rest: &'a [u8]) -> Reader<'a> {
        Reader { rest }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.rest.len() {
            return Err("a field runs past the end of the ClientHello");
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one-byte length prefix.
    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }

    /// A vector with a two-byte length prefix.
    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

/// Parses a ClientHello body (after the 4-byte handshake header) down to its server name.
fn client_hello(body: &[u8]) -> Result<Option<Host>, &'static str> {
    let mut r = Reader::new(body);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    if r.vec8()?.len() > 32 {
        return Err("a legacy session id longer than 32 bytes");
    }
    let suites = r.vec16()?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err("an empty or odd-length cipher suite list");
    }
    if r.vec8()?.is_empty() {
        return Err("an empty compression method list");
    }
    if r.is_empty() {
        return Ok(None); // no extensions at all (very old clients)
    }
    let extensions = r.vec16()?;
    if !r.is_empty() {
        return Err("bytes follow the extensions");
    }
    let mut r = Reader::new(extensions);
    let mut server_name = None;
    let mut seen = false;
    while !r.is_empty() {
        let kind = r.u16()?;
        let data = r.vec16()?;
        if kind == SERVER_NAME {
            if seen {
                return Err("two server_name extensions");
            }
            seen = true;
            server_name = sni_extension(data)?;
        }
    }
    Ok(server_name)
}

/// RFC 6066 3: `ServerNameList`. At most one `host_name` entry.
fn sni_extension(data: &[u8]) -> Result<Option<Host>, &'static str> {
    let mut r = Reader::new(data);
    let list = r.vec16()?;
    if !r.is_empty() {
        return Err("bytes follow the server name list");
    }
    if list.is_empty() {
        return Err("an empty server name list");
    }
    let mut r = Reader::new(list);
    let mut found = None;
    while !r.is_empty() {
        let kind = r.u8()?;
        let name = r.vec16()?;
        if kind != HOST_NAME {
            continue;
        }
        if found.is_some() {
            return Err("two host names in server_name");
        }
        let text = std::str::from_utf8(name).map_err(|_| "a server name that is not ASCII")?;
        found = Some(Host::parse(text).map_err(|_| "a server name that is not a valid host name")?);
    }
    Ok(found)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a ClientHello record as a client would, with an optional server name, padded with
    /// a few other extensions. Used by the integration tests too (copied there by hand).
    pub(crate) fn client_hello_record(server_name: Option<&str>) -> Vec<u8> {
        let mut ext = Vec::new();
        // supported_versions (TLS 1.3)
        ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
        if let Some(name) = server_name {
            let n = name.as_bytes();
            let entry_len = 3 + n.len();
            ext.extend_from_slice(&0u16.to_be_bytes());
            ext.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
            ext.extend_from_slice(&(entry_len as u16).to_be_bytes());
            ext.push(0);
            ext.extend_from_slice(&(n.len() as u16).to_be_bytes());
            ext.extend_from_slice(n);
        }
        // ALPN h2, http/1.1
        ext.extend_from_slice(&[
            0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, b'h', b'2', 0x08, b'h', b't', b't', b'p',
            b'/', b'1', b'.', b'1',
        ]);
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(32);
        body.extend_from_slice(&[9u8; 32]);
        body.extend_from_slice(&[0x00, 0x04, 0x13, 0x01, 0x13, 0x02]);
        body.extend_from_slice(&[0x01, 0x00]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![CLIENT_HELLO];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![HANDSHAKE, 0x03, 0x01];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    /// Splits one record's handshake payload into records of at most `size` bytes.
    fn fragment(record: &[u8], size: usize) -> Vec<u8> {
        let payload = &record[5..];
        let mut out = Vec::new();
        for chunk in payload.chunks(size) {
            out.extend_from_slice(&[HANDSHAKE, 0x03, 0x01]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    fn name(h: &str) -> Hello {
        Hello::ClientHello {
            server_name: Some(Host::parse(h).unwrap()),
        }
    }

    #[test]
    fn reads_the_server_name() {
        assert_eq!(
            inspect(&client_hello_record(Some("Pypi.org"))),
            name("pypi.org")
        );
    }

    #[test]
    fn a_hello_without_server_name_has_none() {
        assert_eq!(
            inspect(&client_hello_record(None)),
            Hello::ClientHello { server_name: None }
        );
    }

    #[test]
    fn every_prefix_asks_for_more() {
        let rec = client_hello_record(Some("example.com"));
        for n in 0..rec.len() {
            assert_eq!(inspect(&rec[..n]), Hello::NeedMore, "prefix {n}");
        }
    }

    #[test]
    fn a_hello_split_across_records_is_reassembled() {
        let rec = client_hello_record(Some("example.com"));
        for size in [1, 3, 4, 17, 100] {
            let split = fragment(&rec, size);
            assert_eq!(inspect(&split), name("example.com"), "size {size}");
            assert_eq!(inspect(&split[..split.len() - 1]), Hello::NeedMore);
        }
    }

    #[test]
    fn non_tls_bytes_are_not_tls() {
        assert_eq!(inspect(b"SSH-2.0-OpenSSH_9.2\r\n"), Hello::NotTls);
        assert_eq!(inspect(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(inspect(&[0x16, 0x02, 0x00]), Hello::NotTls);
    }

    #[test]
    fn malformed_hellos_are_refused() {
        let good = client_hello_record(Some("example.com"));
        // wrong handshake type
        let mut m = good.clone();
        m[5] = 2;
        assert!(matches!(inspect(&m), Hello::Malformed(_)));
        // record longer than 2^14
        let mut m = good.clone();
        m[3] = 0x40;
        m[4] = 0x01;
        assert!(matches!(inspect(&m), Hello::Malformed(_)));
        // extensions length one too long: runs past the body
        let mut m = good.clone();
        let ext_len_at = 5 + 4 + 2 + 32 + 1 + 32 + 2 + 4 + 2;
        m[ext_len_at + 1] += 1;
        assert!(matches!(inspect(&m), Hello::Malformed(_)));
        // an application-data record in the middle of a fragmented hello
        let mut split = fragment(&good, 10);
        split[15] = 0x17;
        assert!(matches!(inspect(&split), Hello::Malformed(_)));
        // a host name with a space
        let m = client_hello_record(Some("a b.example"));
        assert!(matches!(inspect(&m), Hello::Malformed(_)));
    }

    #[test]
    fn two_host_names_are_refused() {
        let n = b"aa.example";
        let entry: Vec<u8> = [&[0u8][..], &(n.len() as u16).to_be_bytes(), n].concat();
        let list: Vec<u8> = [entry.clone(), entry].concat();
        let ext: Vec<u8> = [&(list.len() as u16).to_be_bytes()[..], &list].concat();
        assert!(sni_extension(&ext).is_err());
    }

    proptest! {
        #[test]
        fn inspect_never_panics_on_noise(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = inspect(&bytes);
            let mut tls = vec![0x16, 0x03, 0x01];
            tls.extend_from_slice(&bytes);
            let _ = inspect(&tls);
        }

        #[test]
        fn inspect_never_panics_on_mutated_hellos(
            name in "[a-z]{1,20}\\.[a-z]{2,6}",
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
        ) {
            let mut rec = client_hello_record(Some(&name));
            prop_assert_eq!(inspect(&rec), Hello::ClientHello {
                server_name: Some(Host::parse(&name).unwrap()),
            });
            for (at, byte) in flips {
                let i = at % rec.len();
                rec[i] = byte;
            }
            let _ = inspect(&rec);
            let _ = inspect(&rec[..cut % (rec.len() + 1)]);
        }
    }
}
