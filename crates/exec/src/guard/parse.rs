//! The one place the guard calls the shell parser, with the limits that keep it safe to call on
//! hostile input.
//!
//! The parser is recursive descent: a command nested a few hundred levels deep would overflow
//! the stack, and a stack overflow aborts the whole process (it cannot be caught). So the guard
//! measures nesting with a cheap scan first and refuses, fail closed, to parse anything deeper
//! than real commands ever are.

use brush_parser::ast::Program;
use brush_parser::{Parser, ParserOptions};

/// Longest command the guard parses (bytes). Longer input needs approval.
pub(crate) const MAX_COMMAND_LEN: usize = 64 * 1024;

/// Deepest nesting (parentheses, braces, backquotes, compound keywords) the guard parses.
/// Real agent commands stay under ten; the parser itself copes with about a hundred on a
/// 2 MiB thread stack, so this leaves room for the walker's own recursion on top.
pub(crate) const MAX_NESTING: usize = 32;

/// Why a piece of shell text was not analysed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Longer than [`MAX_COMMAND_LEN`].
    TooLong(usize),
    /// Nested deeper than [`MAX_NESTING`].
    TooDeep(usize),
    /// Contains a NUL byte: bash truncates an argument there but drops it from a script, so
    /// what runs depends on how the backend passes the command.
    Nul,
    /// The grammar rejected it.
    Syntax(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::TooLong(n) => write!(
                f,
                "command is {n} bytes long; the guard analyses at most {MAX_COMMAND_LEN}"
            ),
            Refusal::TooDeep(n) => write!(
                f,
                "command nests {n} levels deep; the guard analyses at most {MAX_NESTING}"
            ),
            Refusal::Nul => write!(f, "command contains a NUL byte"),
            Refusal::Syntax(msg) => write!(f, "shell syntax error: {msg}"),
        }
    }
}

/// Parser options: bash grammar (a superset of POSIX sh), since agents' commands are run by
/// bash more often than not and bash accepts everything sh does.
pub(crate) fn options() -> ParserOptions {
    ParserOptions::default()
}

/// Parses shell text into a program, or says why it will not.
pub(crate) fn program(src: &str) -> Result<Program, Refusal> {
    if src.len() > MAX_COMMAND_LEN {
        return Err(Refusal::TooLong(src.len()));
    }
    if src.contains('\0') {
        return Err(Refusal::Nul);
    }
    let depth = nesting_estimate(src);
    if depth > MAX_NESTING {
        return Err(Refusal::TooDeep(depth));
    }
    let mut parser = Parser::new(std::io::Cursor::new(src.as_bytes()), &options());
    parser
        .parse_program()
        .map_err(|e| Refusal::Syntax(e.to_string()))
}

/// An upper bound on how deeply `src` nests. Quotes are ignored on purpose: counting a `(`
/// inside a string can only overestimate, and overestimating fails closed.
pub(crate) fn nesting_estimate(src: &str) -> usize {
    let mut depth: usize = 0;
    let mut max = 0;
    let mut in_backquote = false;
    let mut word = String::new();
    let end_word = |word: &mut String, depth: &mut usize| {
        match word.as_str() {
            "if" | "case" | "for" | "while" | "until" | "select" => *depth += 1,
            "fi" | "esac" | "done" => *depth = depth.saturating_sub(1),
            _ => {}
        }
        word.clear();
    };
    for c in src.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
            continue;
        }
        end_word(&mut word, &mut depth);
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth = depth.saturating_sub(1),
            '`' => {
                in_backquote = !in_backquote;
                if in_backquote {
                    depth += 1;
                } else {
                    depth = depth.saturating_sub(1);
                }
            }
            _ => {}
        }
        max = max.max(depth);
    }
    end_word(&mut word, &mut depth);
    max.max(depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_across_brackets_and_keywords() {
        assert_eq!(nesting_estimate("echo hi"), 0);
        assert_eq!(nesting_estimate("(cd x && { make; })"), 2);
        assert_eq!(nesting_estimate("if a; then while b; do c; done; fi"), 2);
        assert_eq!(nesting_estimate("echo `date`"), 1);
    }

    #[test]
    fn deep_nesting_is_refused_before_the_parser_sees_it() {
        let deep = format!("{}echo{}", "(".repeat(500), ")".repeat(500));
        assert!(matches!(program(&deep), Err(Refusal::TooDeep(_))));
    }

    #[test]
    fn nul_bytes_are_refused() {
        assert_eq!(program("rm -rf /\0x").err(), Some(Refusal::Nul));
    }

    #[test]
    fn huge_input_is_refused() {
        let long = "a".repeat(MAX_COMMAND_LEN + 1);
        assert!(matches!(program(&long), Err(Refusal::TooLong(_))));
    }

    #[test]
    fn syntax_errors_are_reported_not_panicked() {
        assert!(matches!(program("echo \"open"), Err(Refusal::Syntax(_))));
        assert!(matches!(program("if"), Err(Refusal::Syntax(_))));
    }
}
