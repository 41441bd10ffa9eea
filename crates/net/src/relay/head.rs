//! Reading and parsing an HTTP/1 request head (request line and header fields), bounded in size
//! and strict in syntax: whatever a lenient parser and a strict upstream would read differently
//! is refused rather than guessed at.

use std::io;

use tokio::net::TcpStream;

use super::refusal::Refusal;

/// Size limits for a request head.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadLimits {
    pub max_line: usize,
    pub max_head: usize,
}

/// A parsed request head. Header names keep their case; values are trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// The minor version of `HTTP/1.x`.
    pub minor: u8,
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What can go wrong while reading a head.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The client closed before sending anything: not a request, nothing to answer.
    Empty,
    /// The client closed in the middle of the head.
    Truncated,
    /// Answer with this refusal.
    Refuse(Refusal),
    Io(io::Error),
}

/// Where the head ends, or why it cannot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// More bytes are needed.
    Incomplete,
    /// The head is `buf[..end]` (including the blank line).
    Complete { end: usize },
}

/// Finds the end of the head in `buf`, enforcing the limits: a request line longer than
/// `max_line` is 414, a head longer than `max_head` is 431.
#[cfg(test)]
pub(crate) fn scan(buf: &[u8], limits: HeadLimits) -> Result<Scan, Refusal> {
    Scanner::default().scan(buf, limits)
}

/// [`scan`] that remembers how far it has looked, so a head arriving a byte at a time costs
/// linear time, not quadratic.
#[derive(Debug, Default)]
pub(crate) struct Scanner {
    /// Where the request line ends, once seen (index of its `\n`).
    line_end: Option<usize>,
    /// Up to where no blank line can start.
    searched: usize,
}

impl Scanner {
    pub(crate) fn scan(&mut self, buf: &[u8], limits: HeadLimits) -> Result<Scan, Refusal> {
        let start = skip_leading_newlines(buf);
        let line_end = match self.line_end {
            Some(e) => e,
            None => {
                let from = self.searched.max(start);
                match memchr(b'\n', &buf[from..]) {
                    Some(i) => {
                        self.line_end = Some(from + i);
                        self.searched = from + i;
                        from + i
                    }
                    None => {
                        self.searched = buf.len();
                        if buf.len().saturating_sub(start) > limits.max_line {
                            return Err(Refusal::request_line_too_long(limits));
                        }
                        return Ok(Scan::Incomplete);
                    }
                }
            }
        };
        if line_end.saturating_sub(start) > limits.max_line {
            return Err(Refusal::request_line_too_long(limits));
        }
        // a blank line is `\n\n` or `\n\r\n`; it can start at the request line's `\n`
        let from = self.searched.max(line_end);
        match find_blank_line(&buf[from..]) {
            Some(len) => {
                let end = from + len;
                if end.saturating_sub(start) > limits.max_head {
                    return Err(Refusal::headers_too_large(limits));
                }
                Ok(Scan::Complete { end })
            }
            None => {
                // keep the last two bytes: a blank line may straddle this read and the next
                self.searched = buf.len().saturating_sub(2).max(line_end);
                if buf.len().saturating_sub(start) > limits.max_head {
                    return Err(Refusal::headers_too_large(limits));
                }
                Ok(Scan::Incomplete)
            }
        }
    }
}

/// RFC 9112 section 2.2: a server should ignore at least one empty line before the request line.
fn skip_leading_newlines(buf: &[u8]) -> usize {
    let mut i = 0;
    while i < buf.len() && i < 8 && (buf[i] == b'\r' || buf[i] == b'\n') {
        i += 1;
    }
    i
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

/// The index just past the first empty line (`\n\n` or `\n\r\n`), searching for its first
/// `\n` from the start of `buf`.
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(nl) = memchr(b'\n', &buf[i..]) {
        let after = i + nl + 1;
        match buf.get(after) {
            Some(b'\n') => return Some(after + 1),
            Some(b'\r') if buf.get(after + 1) == Some(&b'\n') => return Some(after + 2),
            _ => {}
        }
        i = after;
    }
    None
}

/// Parses a complete head (as delimited by [`scan`]).
pub(crate) fn parse(head: &[u8]) -> Result<Head, Refusal> {
    let head = &head[skip_leading_newlines(head)..];
    let text = std::str::from_utf8(head)
        .map_err(|_| Refusal::bad_request("the request head is not valid UTF-8"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let (method, target, minor) = parse_request_line(request_line)?;
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            break;
        }
        headers.push(parse_field(line)?);
    }
    Ok(Head {
        method: method.to_string(),
        target: target.to_string(),
        minor,
        headers,
    })
}

fn parse_request_line(line: &str) -> Result<(&str, &str, u8), Refusal> {
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::bad_request(
            "the request line must be `METHOD target HTTP/1.1` with single spaces",
        ));
    };
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(Refusal::bad_request("the method is not an HTTP token"));
    }
    if target.is_empty() || !target.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(Refusal::bad_request(
            "the request target is empty or holds spaces, control or non-ASCII bytes",
        ));
    }
    let minor = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        _ => {
            return Err(Refusal::bad_request(
                "only HTTP/1.0 and HTTP/1.1 requests are understood",
            ));
        }
    };
    Ok((method, target, minor))
}

fn parse_field(line: &str) -> Result<(String, String), Refusal> {
    if line.starts_with([' ', '\t']) {
        return Err(Refusal::bad_request(
            "obsolete header line folding is not accepted",
        ));
    }
    let Some((name, value)) = line.split_once(':') else {
        return Err(Refusal::bad_request("a header line has no `:`"));
    };
    if name.is_empty() || !name.bytes().all(is_token) {
        return Err(Refusal::bad_request(
            "a header name is empty or not an HTTP token (no spaces before `:`)",
        ));
    }
    let value = value.trim_matches([' ', '\t']);
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(Refusal::bad_request(
            "a header value holds control characters",
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// RFC 9110 `tchar`.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Reads a head from `stream`. Returns it with the bytes that followed it (the start of the
/// tunnel or body), which the caller must not lose. The caller bounds the time.
pub(crate) async fn read(
    stream: &TcpStream,
    limits: HeadLimits,
) -> Result<(Head, Vec<u8>), HeadError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut scanner = Scanner::default();
    loop {
        stream.readable().await.map_err(HeadError::Io)?;
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        match stream.try_read_buf(&mut buf) {
            Ok(0) if buf.is_empty() => return Err(HeadError::Empty),
            Ok(0) => return Err(HeadError::Truncated),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(HeadError::Io(e)),
        }
        match scanner.scan(&buf, limits).map_err(HeadError::Refuse)? {
            Scan::Incomplete => continue,
            Scan::Complete { end } => {
                let head = parse(&buf[..end]).map_err(HeadError::Refuse)?;
                let rest = buf.split_off(end);
                return Ok((head, rest));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: HeadLimits = HeadLimits {
        max_line: 8192,
        max_head: 32768,
    };

    fn complete(text: &str) -> Head {
        match scan(text.as_bytes(), L).unwrap() {
            Scan::Complete { end } => parse(&text.as_bytes()[..end]).unwrap(),
            Scan::Incomplete => panic!("incomplete: {text:?}"),
        }
    }

    #[test]
    fn a_connect_head_parses() {
        let h = complete(
            "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nUser-Agent: curl\r\n\r\n",
        );
        assert_eq!(h.method, "CONNECT");
        assert_eq!(h.target, "pypi.org:443");
        assert_eq!(h.minor, 1);
        assert_eq!(h.header("host"), Some("pypi.org:443"));
    }

    #[test]
    fn bare_newlines_and_leading_blank_lines_are_tolerated() {
        let h = complete("\r\nGET http://a.example/ HTTP/1.0\nHost: a.example\n\n");
        assert_eq!(h.method, "GET");
        assert_eq!(h.minor, 0);
    }

    #[test]
    fn incomplete_heads_ask_for_more() {
        assert_eq!(
            scan(b"CONNECT a:443 HTTP/1.1\r\n", L).unwrap(),
            Scan::Incomplete
        );
        assert_eq!(scan(b"", L).unwrap(), Scan::Incomplete);
    }

    #[test]
    fn a_long_request_line_is_414_even_before_its_end() {
        let long = format!("GET http://a.example/{} HTTP/1.1", "x".repeat(9000));
        assert_eq!(scan(long.as_bytes(), L).unwrap_err().status, 414);
        let with_end = format!("{long}\r\n\r\n");
        assert_eq!(scan(with_end.as_bytes(), L).unwrap_err().status, 414);
    }

    #[test]
    fn large_headers_are_431() {
        let mut text = String::from("CONNECT a:443 HTTP/1.1\r\n");
        while text.len() < 40_000 {
            text.push_str("X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert_eq!(scan(text.as_bytes(), L).unwrap_err().status, 431);
        text.push_str("\r\n");
        assert_eq!(scan(text.as_bytes(), L).unwrap_err().status, 431);
    }

    #[test]
    fn malformed_heads_are_400() {
        for bad in [
            "CONNECT  a:443 HTTP/1.1\r\n\r\n",
            "CONNECT a:443\r\n\r\n",
            "CONNECT a:443 HTTP/2.0\r\n\r\n",
            "CONNECT a:443 HTTP/1.1 extra\r\n\r\n",
            "C\x01NNECT a:443 HTTP/1.1\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\nHost : a\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\nNoColon\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "GET http://a/\x7f HTTP/1.1\r\n\r\n",
        ] {
            let r = match scan(bad.as_bytes(), L) {
                Ok(Scan::Complete { end }) => parse(&bad.as_bytes()[..end]).unwrap_err(),
                other => panic!("{bad:?}: {other:?}"),
            };
            assert_eq!(r.status, 400, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn head_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let small = HeadLimits { max_line: 64, max_head: 256 };
            for limits in [L, small] {
                if let Ok(Scan::Complete { end }) = scan(&bytes, limits) {
                    prop_assert!(end <= bytes.len());
                    let _ = parse(&bytes[..end]);
                }
            }
        }

        #[test]
        fn scanning_in_pieces_finds_what_scanning_whole_finds(
            text in "(GET|CONNECT) [a-z:/.]{1,20} HTTP/1\\.1(\r?\n[A-Za-z-]{1,6}: ?[a-z]{0,5}){0,4}(\r?\n)(\r?\n)?[a-z]{0,4}",
            cuts in proptest::collection::vec(0usize..80, 0..8),
        ) {
            let small = HeadLimits { max_line: 30, max_head: 70 };
            let bytes = text.as_bytes();
            let whole = scan(bytes, small);
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < bytes.len()).collect();
            cuts.sort();
            cuts.push(bytes.len());
            let mut scanner = Scanner::default();
            let mut piecewise = Ok(Scan::Incomplete);
            for c in cuts {
                piecewise = scanner.scan(&bytes[..c], small);
                if !matches!(piecewise, Ok(Scan::Incomplete)) {
                    break;
                }
            }
            match (&whole, &piecewise) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => prop_assert_eq!(a.status, b.status),
                _ => prop_assert!(false, "{:?} vs {:?}", whole, piecewise),
            }
        }

        #[test]
        fn structured_heads_never_panic(
            method in "[A-Z]{0,8}|CONNECT|GET",
            target in "[ -~]{0,40}",
            fields in proptest::collection::vec(("[ -~]{0,12}", "[\\x00-\\x7f]{0,20}"), 0..6),
        ) {
            let mut text = format!("{method} {target} HTTP/1.1\r\n");
            for (n, v) in fields {
                text.push_str(&format!("{n}:{v}\r\n"));
            }
            text.push_str("\r\n");
            if let Ok(Scan::Complete { end }) = scan(text.as_bytes(), L) {
                let _ = parse(&text.as_bytes()[..end]);
            }
        }
    }
}
