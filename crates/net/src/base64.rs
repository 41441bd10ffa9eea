//! Standard base64 (RFC 4648, with padding) for Basic credentials and cell tokens.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes `data`.
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn value(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Decodes padded or unpadded base64; `None` for anything else (including trailing spaces).
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let text = match text.iter().position(|&b| b == b'=') {
        Some(i) => {
            let (body, pad) = text.split_at(i);
            if pad.len() > 2 || pad.iter().any(|&b| b != b'=') || (body.len() + pad.len()) % 4 != 0
            {
                return None;
            }
            body
        }
        None => text,
    };
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc_vectors_round_trip() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(i.as_bytes()), o);
            assert_eq!(decode(o.as_bytes()).unwrap(), i.as_bytes());
        }
        assert_eq!(decode(b"Zg").unwrap(), b"f");
        assert!(decode(b"Zg=").is_none());
        assert!(decode(b"Z").is_none());
        assert!(decode(b"Zm9v ").is_none());
    }

    proptest! {
        #[test]
        fn decoding_never_panics_and_encoding_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
            prop_assert_eq!(decode(encode(&bytes).as_bytes()).unwrap(), bytes);
        }
    }
}
