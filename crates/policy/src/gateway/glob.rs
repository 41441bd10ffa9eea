//! Globs for the gateway policy: program paths (`/usr/bin/python3*`), request paths
//! (`/v1/**`) and cell names (`worker-*`).
//!
//! | token | matches |
//! |---|---|
//! | `*` | any run of characters without `/` (possibly empty) |
//! | `?` | one character other than `/` |
//! | `**` | any run of characters, `/` included |
//! | anything else | itself |
//!
//! Matching is on bytes and exact (no case folding). Besides matching, two globs can be asked
//! whether some text matches both ([`Glob::intersects`]): the ambiguity check uses it to tell
//! whether one caller could be named by two rules.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Lit(u8),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**`
    Deep,
}

/// A compiled glob.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    text: String,
    toks: Vec<Tok>,
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.text)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a character class token accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Byte(u8),
    NotSlash,
    Any,
}

impl Class {
    fn meets(self, other: Class) -> bool {
        match (self, other) {
            (Class::Byte(a), Class::Byte(b)) => a == b,
            (Class::Byte(a), Class::NotSlash) | (Class::NotSlash, Class::Byte(a)) => a != b'/',
            _ => true,
        }
    }

    fn accepts(self, b: u8) -> bool {
        match self {
            Class::Byte(x) => x == b,
            Class::NotSlash => b != b'/',
            Class::Any => true,
        }
    }
}

impl Tok {
    fn class(self) -> Class {
        match self {
            Tok::Lit(b) => Class::Byte(b),
            Tok::One | Tok::Star => Class::NotSlash,
            Tok::Deep => Class::Any,
        }
    }

    /// Whether the token may match the empty string (and so be stepped over).
    fn skippable(self) -> bool {
        matches!(self, Tok::Star | Tok::Deep)
    }

    /// Whether consuming a byte keeps the token in place (a star) or moves past it.
    fn repeats(self) -> bool {
        matches!(self, Tok::Star | Tok::Deep)
    }
}

impl Glob {
    /// Compiles `text`. Refuses the empty glob, NUL bytes and more than two stars in a row.
    pub fn new(text: &str) -> Result<Glob, String> {
        if text.is_empty() {
            return Err("empty pattern".into());
        }
        if text.contains('\0') {
            return Err("pattern contains a NUL byte".into());
        }
        if text.contains("***") {
            return Err(format!(
                "`{text}`: `***` means nothing more than `**`; write `*` (within one path \
                 segment) or `**` (across segments)"
            ));
        }
        let bytes = text.as_bytes();
        let mut toks = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'*' if bytes.get(i + 1) == Some(&b'*') => {
                    toks.push(Tok::Deep);
                    i += 2;
                }
                b'*' => {
                    toks.push(Tok::Star);
                    i += 1;
                }
                b'?' => {
                    toks.push(Tok::One);
                    i += 1;
                }
                b => {
                    toks.push(Tok::Lit(b));
                    i += 1;
                }
            }
        }
        Ok(Glob {
            text: text.to_string(),
            toks,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the glob has no wildcard (matches exactly one text).
    pub fn is_literal(&self) -> bool {
        self.toks.iter().all(|t| matches!(t, Tok::Lit(_)))
    }

    /// Whether `text` matches the whole glob.
    pub fn matches(&self, text: &str) -> bool {
        let text = text.as_bytes();
        // reachable[i]: the glob's first i tokens can match the text read so far
        let n = self.toks.len();
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        self.close(&mut reach);
        for &b in text {
            let mut next = vec![false; n + 1];
            for i in 0..n {
                if !reach[i] {
                    continue;
                }
                let t = self.toks[i];
                if t.class().accepts(b) {
                    if t.repeats() {
                        next[i] = true;
                    } else {
                        next[i + 1] = true;
                    }
                }
            }
            self.close(&mut next);
            if !next.iter().any(|&r| r) {
                return false;
            }
            reach = next;
        }
        reach[n]
    }

    /// Extends a reachable set over stars that match nothing.
    fn close(&self, reach: &mut [bool]) {
        for i in 0..self.toks.len() {
            if reach[i] && self.toks[i].skippable() {
                reach[i + 1] = true;
            }
        }
    }

    /// Whether some text matches both `self` and `other`.
    pub fn intersects(&self, other: &Glob) -> bool {
        let (a, b) = (&self.toks, &other.toks);
        let (n, m) = (a.len(), b.len());
        let mut seen = vec![false; (n + 1) * (m + 1)];
        let mut stack = vec![(0usize, 0usize)];
        while let Some((i, j)) = stack.pop() {
            if seen[i * (m + 1) + j] {
                continue;
            }
            seen[i * (m + 1) + j] = true;
            if i == n && j == m {
                return true;
            }
            if i < n && a[i].skippable() {
                stack.push((i + 1, j));
            }
            if j < m && b[j].skippable() {
                stack.push((i, j + 1));
            }
            if i < n && j < m && a[i].class().meets(b[j].class()) {
                let ni = if a[i].repeats() { i } else { i + 1 };
                let nj = if b[j].repeats() { j } else { j + 1 };
                if (ni, nj) != (i, j) {
                    stack.push((ni, nj));
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn g(t: &str) -> Glob {
        Glob::new(t).unwrap()
    }

    #[test]
    fn stars_stay_within_a_segment_and_double_stars_cross() {
        assert!(g("/usr/bin/python3*").matches("/usr/bin/python3.11"));
        assert!(!g("/usr/bin/*").matches("/usr/bin/x/y"));
        assert!(g("/usr/**").matches("/usr/bin/x/y"));
        assert!(g("/v1/**").matches("/v1/"));
        assert!(!g("/v1/**").matches("/v1"));
        assert!(g("/v?/x").matches("/v1/x"));
        assert!(!g("/v?/x").matches("/v//x"));
        assert!(g("worker-*").matches("worker-"));
        assert!(!g("worker").matches("worker2"));
        assert!(g("a*b*c").matches("aXbYc"));
        assert!(!g("a*b*c").matches("aXbY"));
    }

    #[test]
    fn intersections_are_exact() {
        assert!(g("/usr/bin/*").intersects(&g("/usr/*/curl")));
        assert!(!g("/usr/bin/curl").intersects(&g("/usr/bin/python3")));
        assert!(g("/usr/bin/python3*").intersects(&g("/usr/bin/python3.11")));
        assert!(!g("/usr/bin/*").intersects(&g("/usr/bin/x/y")));
        assert!(g("/usr/**").intersects(&g("/usr/bin/x/y")));
        assert!(!g("a*").intersects(&g("b*")));
        assert!(g("*a").intersects(&g("b*")));
        assert!(!g("?").intersects(&g("/")));
    }

    #[test]
    fn bad_globs_are_refused() {
        assert!(Glob::new("").is_err());
        assert!(Glob::new("/a/***").is_err());
        assert!(Glob::new("a\0").is_err());
    }

    proptest! {
        #[test]
        fn matching_never_panics_and_agrees_with_intersection(
            pat in "[ab/*?]{1,8}",
            text in "[ab/]{0,8}",
        ) {
            if let Ok(p) = Glob::new(&pat) {
                let lit = Glob::new(&text);
                let m = p.matches(&text);
                if let Ok(l) = lit {
                    prop_assert_eq!(m, p.intersects(&l));
                    prop_assert_eq!(m, l.intersects(&p));
                }
            }
        }
    }
}
