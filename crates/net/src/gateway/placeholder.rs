//! Placeholders: `nestbox:resolve:env:NAME` (and, when enabled, `openshell:resolve:env:NAME`)
//! found in request header values, path segments and query values, replaced by the secret.
//!
//! A placeholder is complete when the prefix is followed by a name: a letter or `_`, then
//! letters, digits and `_`. The name ends at the first other character. The colons may also be
//! percent-encoded (`%3A`), as clients encode them in paths and queries. Text that merely
//! contains the prefix (`nestbox:resolve:env:` followed by nothing or a space) is not a
//! placeholder and passes untouched.
//!
//! This module only finds and rewrites. Which names may be resolved, for whom and towards where,
//! is decided by the caller of [`rewrite`] through the `resolve` callback.

/// Which placeholder prefixes are recognized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forms {
    /// Also `openshell:resolve:env:NAME`.
    pub openshell: bool,
}

const PREFIXES: [&[u8]; 2] = [b"nestbox", b"openshell"];
const REST: [&[u8]; 2] = [b"resolve", b"env"];

/// One placeholder found in a text: `text[start..end]` names `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Where it starts.
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
    /// The credential name.
    pub name: String,
}

/// Matches a `:` or its percent-encoding at `at`; returns the length matched.
fn colon(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b':' => Some(1),
        b'%' => {
            let hex = bytes.get(at + 1..at + 3)?;
            (hex[0] == b'3' && (hex[1] == b'A' || hex[1] == b'a')).then_some(3)
        }
        _ => None,
    }
}

fn word(bytes: &[u8], at: usize, w: &[u8]) -> Option<usize> {
    let got = bytes.get(at..at + w.len())?;
    got.eq_ignore_ascii_case(w).then_some(w.len())
}

fn name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Tries to read a complete placeholder at `at`.
fn at(bytes: &[u8], at_: usize, forms: Forms) -> Option<Found> {
    for (i, prefix) in PREFIXES.iter().enumerate() {
        if i == 1 && !forms.openshell {
            continue;
        }
        let Some(mut p) = word(bytes, at_, prefix).map(|n| at_ + n) else {
            continue;
        };
        let mut ok = true;
        for w in REST {
            match colon(bytes, p).and_then(|c| word(bytes, p + c, w).map(|n| c + n)) {
                Some(n) => p += n,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            continue;
        }
        let Some(c) = colon(bytes, p) else { continue };
        p += c;
        if !bytes.get(p).copied().is_some_and(name_start) {
            continue;
        }
        let start_name = p;
        while bytes.get(p).copied().is_some_and(name_byte) {
            p += 1;
        }
        // SAFETY of the conversion: the name is ASCII by construction
        let name = String::from_utf8_lossy(&bytes[start_name..p]).into_owned();
        return Some(Found {
            start: at_,
            end: p,
            name,
        });
    }
    None
}

/// Every complete placeholder in `text`, left to right, not overlapping.
pub fn find_all(text: &[u8], forms: Forms) -> Vec<Found> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if (b == b'n' || b == b'N' || b == b'o' || b == b'O')
            && let Some(f) = at(text, i, forms)
        {
            i = f.end;
            out.push(f);
            continue;
        }
        i += 1;
    }
    out
}

/// Whether `text` holds a complete placeholder.
pub fn contains(text: &[u8], forms: Forms) -> bool {
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if (b == b'n' || b == b'N' || b == b'o' || b == b'O') && at(text, i, forms).is_some() {
            return true;
        }
        i += 1;
    }
    false
}

/// How a resolved value is written where the placeholder was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// A header value: as it is (the resolver refuses CR, LF and NUL).
    Header,
    /// A path segment or a query value: percent-encoded except unreserved characters.
    Url,
}

/// Replaces every placeholder in `text`. `resolve(name)` returns the value or refuses (its
/// error is returned as is). Returns `None` when `text` held no placeholder.
pub fn rewrite<E>(
    text: &[u8],
    forms: Forms,
    place: Place,
    resolve: &mut dyn FnMut(&str) -> Result<Vec<u8>, E>,
) -> Result<Option<Vec<u8>>, E> {
    let found = find_all(text, forms);
    if found.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(text.len() + 32);
    let mut last = 0;
    for f in found {
        out.extend_from_slice(&text[last..f.start]);
        let value = resolve(&f.name)?;
        match place {
            Place::Header => out.extend_from_slice(&value),
            Place::Url => percent_encode(&value, &mut out),
        }
        last = f.end;
    }
    out.extend_from_slice(&text[last..]);
    Ok(Some(out))
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Rewrites a header value, including inside `Basic base64(user:pass)` credentials (decoded,
/// rewritten, encoded again).
pub fn rewrite_header<E>(
    value: &[u8],
    forms: Forms,
    resolve: &mut dyn FnMut(&str) -> Result<Vec<u8>, E>,
) -> Result<Option<Vec<u8>>, E> {
    if let Some(rest) = strip_basic(value)
        && let Some(decoded) = crate::base64::decode(rest)
        && let Some(inner) = rewrite(&decoded, forms, Place::Header, resolve)?
    {
        let mut out = value[..value.len() - rest.len()].to_vec();
        out.extend_from_slice(crate::base64::encode(&inner).as_bytes());
        return Ok(Some(out));
    }
    rewrite(value, forms, Place::Header, resolve)
}

/// The names in a header value, including inside Basic credentials.
pub fn names_in_header(value: &[u8], forms: Forms) -> Vec<String> {
    let mut names: Vec<String> = find_all(value, forms).into_iter().map(|f| f.name).collect();
    if let Some(rest) = strip_basic(value)
        && let Some(decoded) = crate::base64::decode(rest)
    {
        names.extend(find_all(&decoded, forms).into_iter().map(|f| f.name));
    }
    names
}

/// `Basic <token>` (scheme case-insensitive): the token.
fn strip_basic(value: &[u8]) -> Option<&[u8]> {
    let trimmed = value.strip_prefix(b" ").unwrap_or(value);
    if trimmed.len() > 6 && trimmed[..6].eq_ignore_ascii_case(b"basic ") {
        let token = &trimmed[6..];
        let start = token.iter().position(|&b| b != b' ')?;
        Some(&token[start..])
    } else {
        None
    }
}

/// Scans a request body as it arrives, across chunk boundaries, for a complete placeholder.
/// Keeps only a short tail of the previous chunk.
#[derive(Debug)]
pub struct BodyScanner {
    forms: Forms,
    tail: Vec<u8>,
    /// The name of the first placeholder seen.
    pub found: Option<String>,
}

/// The longest a placeholder prefix can be, percent-encoded (`openshell%3Aresolve%3Aenv%3A`).
const MAX_PREFIX: usize = 9 + 3 + 7 + 3 + 3 + 3;
/// Names longer than this are still found, by their first bytes.
const KEEP: usize = MAX_PREFIX + 1;

impl BodyScanner {
    /// A scanner for `forms`.
    pub fn new(forms: Forms) -> BodyScanner {
        BodyScanner {
            forms,
            tail: Vec::new(),
            found: None,
        }
    }

    /// Looks at the next chunk; returns true once a placeholder has been seen.
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        if self.found.is_some() {
            return true;
        }
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(chunk);
        if let Some(f) = find_all(&window, self.forms).into_iter().next() {
            self.found = Some(f.name);
            return true;
        }
        let keep = window.len().min(KEEP);
        self.tail = window[window.len() - keep..].to_vec();
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const N: Forms = Forms { openshell: false };
    const O: Forms = Forms { openshell: true };

    fn names(t: &str, f: Forms) -> Vec<String> {
        find_all(t.as_bytes(), f)
            .into_iter()
            .map(|f| f.name)
            .collect()
    }

    #[test]
    fn complete_placeholders_are_found_and_the_bare_prefix_is_not() {
        assert_eq!(names("nestbox:resolve:env:KEY", N), ["KEY"]);
        assert_eq!(names("Bearer nestbox:resolve:env:A_1 x", N), ["A_1"]);
        assert_eq!(names("/bot nestbox%3Aresolve%3aenv%3ATOK/send", N), ["TOK"]);
        assert!(names("the prefix nestbox:resolve:env: alone", N).is_empty());
        assert!(names("nestbox:resolve:env:1X", N).is_empty());
        assert!(names("openshell:resolve:env:KEY", N).is_empty());
        assert_eq!(names("openshell:resolve:env:KEY", O), ["KEY"]);
        assert_eq!(names("NESTBOX:RESOLVE:ENV:k", N), ["k"]);
        assert_eq!(
            names("nestbox:resolve:env:A/nestbox:resolve:env:B", N),
            ["A", "B"]
        );
    }

    fn secret(name: &str) -> Result<Vec<u8>, String> {
        match name {
            "KEY" => Ok(b"s3cr3t/+=".to_vec()),
            other => Err(format!("unknown {other}")),
        }
    }

    #[test]
    fn rewriting_replaces_in_place_and_encodes_urls() {
        let r = rewrite(
            b"Bearer nestbox:resolve:env:KEY",
            N,
            Place::Header,
            &mut secret,
        )
        .unwrap();
        assert_eq!(r.unwrap(), b"Bearer s3cr3t/+=");
        let r = rewrite(
            b"/bot nestbox:resolve:env:KEY/send",
            N,
            Place::Url,
            &mut secret,
        )
        .unwrap();
        assert_eq!(r.unwrap(), b"/bot s3cr3t%2F%2B%3D/send");
        assert_eq!(
            rewrite(b"plain", N, Place::Header, &mut secret).unwrap(),
            None
        );
        assert!(rewrite(b"nestbox:resolve:env:OTHER", N, Place::Header, &mut secret).is_err());
    }

    #[test]
    fn basic_credentials_are_decoded_rewritten_and_encoded() {
        let user_ph = crate::base64::encode(b"user:nestbox:resolve:env:KEY");
        let value = format!("Basic {user_ph}");
        assert_eq!(names_in_header(value.as_bytes(), N), ["KEY"]);
        let out = rewrite_header(value.as_bytes(), N, &mut secret)
            .unwrap()
            .unwrap();
        let expected = format!("Basic {}", crate::base64::encode(b"user:s3cr3t/+="));
        assert_eq!(out, expected.as_bytes());
    }

    #[test]
    fn the_body_scanner_sees_placeholders_split_across_chunks() {
        let text = b"{\"x\": \"nestbox:resolve:env:KEY\"}";
        for cut in 0..text.len() {
            let mut s = BodyScanner::new(N);
            let seen = s.push(&text[..cut]) | s.push(&text[cut..]);
            assert!(seen, "cut at {cut}");
        }
        let mut s = BodyScanner::new(N);
        assert!(!s.push(b"the nestbox:resolve:env: prefix"));
        assert!(!s.push(b" and more"));
    }

    proptest! {
        #[test]
        fn scanning_and_rewriting_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = find_all(&bytes, O);
            let _ = names_in_header(&bytes, O);
            let _ = rewrite_header(&bytes, O, &mut |_| Ok::<_, ()>(b"v".to_vec()));
            let mut s = BodyScanner::new(O);
            let _ = s.push(&bytes);
        }

        #[test]
        fn a_rewritten_text_holds_no_placeholder(
            parts in proptest::collection::vec("[a-z /:%3A]{0,6}|nestbox:resolve:env:[A-Z_]{1,5}|nestbox%3Aresolve%3Aenv%3AK", 0..6)
        ) {
            let text = parts.concat();
            let out = rewrite(text.as_bytes(), N, Place::Header, &mut |_| Ok::<_, ()>(b"1".to_vec())).unwrap();
            let out = out.unwrap_or_else(|| text.clone().into_bytes());
            prop_assert!(!contains(&out, N));
        }

        #[test]
        fn splitting_a_body_anywhere_finds_the_same(pre in "[a-z :]{0,30}", post in "[a-z :]{0,30}", cut in 0usize..100) {
            let text = format!("{pre}nestbox:resolve:env:KEY{post}");
            let cut = cut.min(text.len());
            let mut s = BodyScanner::new(N);
            let seen = s.push(&text.as_bytes()[..cut]) | s.push(&text.as_bytes()[cut..]);
            prop_assert!(seen);
        }
    }
}
