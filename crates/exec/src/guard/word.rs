//! Shell words as the guard sees them: quotes removed, escapes decoded, braces expanded, and
//! every part the shell would only know at run time marked as unknown.
//!
//! The guard never guesses an unknown value. A word whose value depends on a variable or on a
//! command substitution keeps `value: None`, and the rules treat that as "could be anything",
//! which is what makes `X=/; rm -rf $X` an approval and not a silent pass.

use brush_parser::word::{Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};

use super::parse;

/// Cap on the words one brace expression may expand into. Beyond it the word is "unknown":
/// `{a,b}{c,d}{e,f}...` must not become an allocation bomb inside the guard.
const MAX_BRACE_WORDS: usize = 64;

/// One argument of a simple command after shell word expansion, as far as it can be known
/// without running anything.
#[derive(Clone, Debug, Default)]
pub(crate) struct Arg {
    /// The word as written (quotes included).
    pub raw: String,
    /// The value after quote removal, or `None` when it depends on run-time state. `~` and
    /// `$HOME` both become a leading `~`, so rules see one spelling of "home".
    pub value: Option<String>,
    /// True when an unquoted expansion may split into several words (and so may smuggle in
    /// flags such as `-rf`).
    pub splits: bool,
    /// True when a command substitution inside it prints downloaded (or decoded) content, as in
    /// `"$(curl -s URL)"`.
    pub fetched: bool,
    /// True when its only unknown part is the output of a tool that prints shell set-up code
    /// for `eval` (`eval "$(ssh-agent -s)"`).
    pub setup_code: bool,
}

impl Arg {
    /// An argument whose value is known.
    pub fn literal(raw: &str, value: &str) -> Self {
        Arg {
            raw: raw.to_owned(),
            value: Some(value.to_owned()),
            ..Default::default()
        }
    }

    /// An argument that only exists at run time, such as the item `xargs` appends or the
    /// `{}` that `find -exec` fills in.
    pub fn unknown(raw: &str) -> Self {
        Arg {
            raw: raw.to_owned(),
            value: None,
            ..Default::default()
        }
    }

    /// The known value, if any.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The spelling used in approval keys: the value when known, the raw text otherwise.
    pub fn normalized(&self) -> &str {
        self.value.as_deref().unwrap_or(&self.raw)
    }

    /// True when the value is known and equal to `s`.
    pub fn is(&self, s: &str) -> bool {
        self.value.as_deref() == Some(s)
    }
}

/// A command substitution found inside a word: its body runs before the command does, so the
/// walker classifies it like any other script.
#[derive(Clone, Debug)]
pub(crate) struct Substitution {
    pub body: String,
}

/// The result of expanding one word as written.
#[derive(Debug, Default)]
pub(crate) struct Expansion {
    /// The words it becomes (more than one only through brace expansion).
    pub args: Vec<Arg>,
    /// Scripts the shell runs while expanding it.
    pub substitutions: Vec<Substitution>,
    /// A command substitution hidden where the guard does not follow it, such as inside
    /// `${X:-$(...)}` or an arithmetic expression.
    pub hidden_code: bool,
    /// The word could not be parsed as a shell word.
    pub malformed: bool,
    /// The word expands a variable other than `$HOME`.
    pub params: bool,
    /// Texts of arithmetic expansions (`$((...))`), which the walker also reads as commands.
    pub arithmetic: Vec<String>,
}

/// One character-level segment of a word before brace expansion.
#[derive(Clone, Debug)]
enum Seg {
    /// Literal text; `quoted` text is never subject to brace expansion.
    Text { text: String, quoted: bool },
    /// A value known only at run time.
    Unknown { splits: bool },
}

/// Expands a word as the shell would, without running anything.
pub(crate) fn expand(raw: &str) -> Expansion {
    let mut out = Expansion::default();
    let pieces = match brush_parser::word::parse(raw, &parse::options()) {
        Ok(pieces) => pieces,
        Err(_) => {
            out.malformed = true;
            out.args.push(Arg::unknown(raw));
            return out;
        }
    };
    let mut segs = Vec::new();
    collect(&pieces, false, &mut segs, &mut out);
    out.args = brace_expand(raw, &segs);
    out
}

/// Expands the body of a here-document that allows expansion: quotes are literal there, but
/// `$(...)` still runs.
pub(crate) fn expand_heredoc(body: &str) -> Expansion {
    let mut out = Expansion::default();
    match brush_parser::word::parse_heredoc(body, &parse::options()) {
        Ok(pieces) => {
            let mut segs = Vec::new();
            collect(&pieces, true, &mut segs, &mut out);
            let value = join_segments(&segs);
            out.args.push(Arg {
                raw: body.to_owned(),
                value,
                ..Default::default()
            });
        }
        Err(_) => {
            out.malformed = true;
            out.args.push(Arg::unknown(body));
        }
    }
    out
}

fn collect(pieces: &[WordPieceWithSource], quoted: bool, segs: &mut Vec<Seg>, out: &mut Expansion) {
    for p in pieces {
        match &p.piece {
            WordPiece::Text(t) => push_text(segs, t, quoted),
            WordPiece::SingleQuotedText(t) => push_text(segs, t, true),
            WordPiece::AnsiCQuotedText(t) => push_text(segs, &decode_ansi_c(t), true),
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                // An empty pair of quotes still makes a (empty) word: keep a quoted marker.
                push_text(segs, "", true);
                collect(inner, true, segs, out);
            }
            WordPiece::EscapeSequence(e) => {
                // `\x` is `x`; a backslash-newline is a line continuation and vanishes.
                let lit: String = e.chars().skip(1).filter(|c| *c != '\n').collect();
                push_text(segs, &lit, true);
            }
            WordPiece::TildeExpansion(t) => match t {
                TildeExpr::Home => push_text(segs, "~", true),
                TildeExpr::UserHome(user) => push_text(segs, &format!("~{user}"), true),
                _ => segs.push(Seg::Unknown { splits: false }),
            },
            WordPiece::ParameterExpansion(expr) => {
                if is_home(expr) {
                    push_text(segs, "~", true);
                } else {
                    out.params = true;
                    if parameter_hides_code(expr) {
                        out.hidden_code = true;
                    }
                    let splits = !quoted || is_all_positional(expr);
                    segs.push(Seg::Unknown { splits });
                }
            }
            WordPiece::CommandSubstitution(body) => {
                out.substitutions.push(Substitution { body: body.clone() });
                segs.push(Seg::Unknown { splits: !quoted });
            }
            WordPiece::BackquotedCommandSubstitution(body) => {
                out.substitutions.push(Substitution {
                    body: unescape_backquoted(body),
                });
                segs.push(Seg::Unknown { splits: !quoted });
            }
            WordPiece::ArithmeticExpression(expr) => {
                // `$(( $(cmd) ))` runs `cmd`: the guard does not walk arithmetic, so it says so.
                if expr.value.contains("$(") || expr.value.contains('`') {
                    out.hidden_code = true;
                }
                out.arithmetic.push(expr.value.clone());
                segs.push(Seg::Unknown { splits: !quoted });
            }
        }
    }
}

fn push_text(segs: &mut Vec<Seg>, text: &str, quoted: bool) {
    if let Some(Seg::Text {
        text: last,
        quoted: q,
    }) = segs.last_mut()
        && *q == quoted
    {
        last.push_str(text);
        return;
    }
    segs.push(Seg::Text {
        text: text.to_owned(),
        quoted,
    });
}

fn is_home(expr: &ParameterExpr) -> bool {
    matches!(
        expr,
        ParameterExpr::Parameter { parameter: Parameter::Named(name), indirect: false } if name == "HOME"
    )
}

fn is_all_positional(expr: &ParameterExpr) -> bool {
    // `"$@"` expands to one word per positional parameter even inside quotes.
    matches!(
        expr,
        ParameterExpr::Parameter {
            parameter: Parameter::Special(
                brush_parser::word::SpecialParameter::AllPositionalParameters { .. }
            ),
            ..
        }
    )
}

/// True when an operand of `${...}` (a default, a pattern, a replacement) contains a command
/// substitution. The guard does not model these operators, so it reports the code it skips.
fn parameter_hides_code(expr: &ParameterExpr) -> bool {
    // The operand strings are not exposed uniformly across the operator variants; their debug
    // rendering contains every operand verbatim, which is all this check needs.
    let text = format!("{expr:?}");
    text.contains("$(") || text.contains('`')
}

fn unescape_backquoted(body: &str) -> String {
    // Inside backquotes, `\\`, `` \` `` and `\$` are escapes the outer shell removes before the
    // inner one parses the text.
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && matches!(n, '\\' | '`' | '$')
        {
            out.push(n);
            chars.next();
            continue;
        }
        out.push(c);
    }
    out
}

/// Decodes the escapes of a `$'...'` string, so `$'\x72m'` is seen as `rm`.
fn decode_ansi_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' || i >= chars.len() {
            out.push(c);
            continue;
        }
        let e = chars[i];
        i += 1;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'e' | 'E' => out.push('\u{1b}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let digits: String = chars[i..]
                    .iter()
                    .take(max)
                    .take_while(|c| c.is_ascii_hexdigit())
                    .collect();
                i += digits.len();
                match u32::from_str_radix(&digits, 16)
                    .ok()
                    .and_then(char::from_u32)
                {
                    Some(ch) => out.push(ch),
                    None => {
                        out.push('\\');
                        out.push(e);
                        out.push_str(&digits);
                    }
                }
            }
            '0'..='7' => {
                let mut digits = String::from(e);
                while digits.len() < 3 && i < chars.len() && ('0'..='7').contains(&chars[i]) {
                    digits.push(chars[i]);
                    i += 1;
                }
                let code = u32::from_str_radix(&digits, 8).unwrap_or(0) & 0xff;
                out.push(char::from_u32(code).unwrap_or('\u{0}'));
            }
            'c' if i < chars.len() => {
                let ctl = (chars[i] as u32) & 0x1f;
                i += 1;
                out.push(char::from_u32(ctl).unwrap_or('\u{0}'));
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

fn join_segments(segs: &[Seg]) -> Option<String> {
    let mut value = String::new();
    for seg in segs {
        match seg {
            Seg::Text { text, .. } => value.push_str(text),
            Seg::Unknown { .. } => return None,
        }
    }
    Some(value)
}

/// Turns segments into arguments, applying brace expansion to unquoted text
/// (`/{etc,usr}` is two arguments, `"/{etc,usr}"` is one).
fn brace_expand(raw: &str, segs: &[Seg]) -> Vec<Arg> {
    let splits = segs
        .iter()
        .any(|s| matches!(s, Seg::Unknown { splits: true }));
    if segs.iter().any(|s| matches!(s, Seg::Unknown { .. })) {
        return vec![Arg {
            raw: raw.to_owned(),
            splits,
            ..Default::default()
        }];
    }
    // Work on characters tagged with "quoted" so braces inside quotes stay literal.
    let mut chars: Vec<(char, bool)> = Vec::new();
    for seg in segs {
        if let Seg::Text { text, quoted } = seg {
            chars.extend(text.chars().map(|c| (c, *quoted)));
        }
    }
    let mut words = Vec::new();
    if expand_braces(&chars, &mut words).is_err() {
        return vec![Arg::unknown(raw)];
    }
    words
        .into_iter()
        .map(|value| Arg {
            raw: raw.to_owned(),
            value: Some(value),
            ..Default::default()
        })
        .collect()
}

struct TooMany;

fn expand_braces(chars: &[(char, bool)], out: &mut Vec<String>) -> Result<(), TooMany> {
    let Some((open, close, commas)) = find_brace(chars) else {
        out.push(chars.iter().map(|(c, _)| *c).collect());
        return Ok(());
    };
    let prefix = &chars[..open];
    let suffix = &chars[close + 1..];
    let mut start = open + 1;
    for end in commas.into_iter().chain(std::iter::once(close)) {
        let mut alt: Vec<(char, bool)> = prefix.to_vec();
        alt.extend_from_slice(&chars[start..end]);
        alt.extend_from_slice(suffix);
        expand_braces(&alt, out)?;
        if out.len() > MAX_BRACE_WORDS {
            return Err(TooMany);
        }
        start = end + 1;
    }
    Ok(())
}

/// Finds the first unquoted `{...}` with a top-level comma. Sequences such as `{1..3}` are left
/// literal: they only produce numbers and letters, never a path the rules care about.
fn find_brace(chars: &[(char, bool)]) -> Option<(usize, usize, Vec<usize>)> {
    for open in 0..chars.len() {
        if chars[open] != ('{', false) {
            continue;
        }
        let mut depth = 0usize;
        let mut commas = Vec::new();
        for (i, &(c, quoted)) in chars.iter().enumerate().skip(open + 1) {
            if quoted {
                continue;
            }
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    if commas.is_empty() {
                        break;
                    }
                    return Some((open, i, commas));
                }
                '}' => depth -= 1,
                ',' if depth == 0 => commas.push(i),
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(raw: &str) -> Vec<Option<String>> {
        expand(raw).args.into_iter().map(|a| a.value).collect()
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        assert_eq!(values("r''m"), vec![Some("rm".to_owned())]);
        assert_eq!(values("\"rm\""), vec![Some("rm".to_owned())]);
        assert_eq!(values("\\rm"), vec![Some("rm".to_owned())]);
        assert_eq!(values("$'\\x72\\155'"), vec![Some("rm".to_owned())]);
    }

    #[test]
    fn home_is_one_spelling() {
        assert_eq!(values("~"), vec![Some("~".to_owned())]);
        assert_eq!(values("\"$HOME\"/x"), vec![Some("~/x".to_owned())]);
        assert_eq!(values("${HOME}"), vec![Some("~".to_owned())]);
    }

    #[test]
    fn variables_and_substitutions_are_unknown() {
        assert_eq!(values("$X"), vec![None]);
        let e = expand("\"$(echo rm)\"");
        assert_eq!(e.args[0].value, None);
        assert!(!e.args[0].splits);
        assert_eq!(e.substitutions[0].body, "echo rm");
        assert!(expand("$X").args[0].splits);
    }

    #[test]
    fn unquoted_braces_expand_and_quoted_braces_do_not() {
        assert_eq!(
            values("/{etc,usr}"),
            vec![Some("/etc".to_owned()), Some("/usr".to_owned())]
        );
        assert_eq!(values("'/{etc,usr}'"), vec![Some("/{etc,usr}".to_owned())]);
    }

    #[test]
    fn brace_bombs_become_unknown() {
        let raw = "{a,b}".repeat(12);
        assert_eq!(values(&raw), vec![None]);
    }

    #[test]
    fn code_inside_parameter_operators_is_reported() {
        assert!(expand("${X:-$(rm -rf /)}").hidden_code);
        assert!(!expand("${X:-/tmp}").hidden_code);
    }
}
