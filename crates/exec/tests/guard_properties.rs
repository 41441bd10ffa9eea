//! Properties the guard must keep for every input, checked with generated commands:
//! respelling a command the way a shell reads identically (quotes, escapes, whitespace, line
//! continuations, wrappers) never changes its verdict or its approval keys, and no input makes
//! the guard panic.

use nestbox_exec::guard::{self, Tier};
use proptest::prelude::*;
use proptest::sample::select;

/// Harmless commands, as words. Each word is passed to the shell as one word.
const HARMLESS: &[&[&str]] = &[
    &["rm", "-rf", "./build"],
    &["rm", "-rf", "node_modules"],
    &["rm", "-f", "a.o", "b.o"],
    &["grep", "rm -rf /", "notes.txt"],
    &["echo", "curl x | sh"],
    &["git", "push"],
    &["git", "push", "-u", "origin", "feature"],
    &["git", "reset", "--soft", "HEAD~1"],
    &["git", "commit", "-m", "git push --force later"],
    &["chmod", "755", "script.sh"],
    &["chmod", "-R", "u+rwX", "./build"],
    &["docker", "run", "--rm", "alpine"],
    &["cat", "/etc/hosts"],
    &["find", ".", "-name", "*.pyc", "-delete"],
    &["kill", "-9", "12345"],
    &["dd", "if=/dev/zero", "of=disk.img", "bs=1M", "count=1"],
    &["bash", "-c", "ls -la"],
    &["python3", "-c", "print(1)"],
    &["cargo", "test", "--workspace"],
    &["ls", "-la", "/"],
];

/// Dangerous commands, as words, with the tier they must keep.
const DANGEROUS: &[(&[&str], Tier)] = &[
    (&["rm", "-rf", "/"], Tier::Hardline),
    (&["rm", "-fr", "--no-preserve-root", "/"], Tier::Hardline),
    (&["rm", "-r", "-f", "/usr/.."], Tier::Hardline),
    (&["dd", "if=/dev/zero", "of=/dev/sda"], Tier::Hardline),
    (&["mkfs.ext4", "/dev/sda1"], Tier::Hardline),
    (&["kill", "-9", "-1"], Tier::Hardline),
    (&["bash", "-c", "rm -rf /"], Tier::Hardline),
    (&["sh", "-c", "sh -c 'rm -rf /'"], Tier::Hardline),
    (&["find", "/", "-delete"], Tier::Hardline),
    (&["rm", "-rf", "/etc"], Tier::Approval),
    (&["rm", "-rf", ".."], Tier::Approval),
    (&["git", "push", "--force"], Tier::Approval),
    (&["git", "reset", "--hard"], Tier::Approval),
    (&["git", "clean", "-fdx"], Tier::Approval),
    (&["chmod", "-R", "777", "."], Tier::Approval),
    (&["docker", "run", "--privileged", "alpine"], Tier::Approval),
    (&["crontab", "-r"], Tier::Approval),
    (&["iptables", "-F"], Tier::Approval),
    (&["shutdown", "-h", "now"], Tier::Approval),
];

/// Wrappers that run the command unchanged.
const WRAPPERS: &[&str] = &[
    "",
    "sudo ",
    "env ",
    "nohup ",
    "timeout 5 ",
    "nice -n 5 ",
    "command ",
    "/usr/bin/env ",
    "sudo -u root -- ",
];

/// Separators between words that the shell treats alike.
const SEPARATORS: &[&str] = &[" ", "  ", "\t", " \\\n "];

/// One way of writing a word. Every spelling means the same word to the shell.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    Bare,
    Single,
    Double,
    /// An empty quote pair inside the word: `r''m`.
    EmptyQuotes(usize),
    /// A backslash before one character: `r\m`.
    Backslash(usize),
}

fn is_plain(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-./_=:@,+".contains(c))
}

/// Writes `word` with `spelling`, falling back to a quoted spelling where the bare word would
/// not survive the shell (spaces, `*`, `|`, `~`).
fn spell(word: &str, spelling: Spelling) -> String {
    let single = || format!("'{}'", word.replace('\'', r"'\''"));
    if !is_plain(word) {
        return match spelling {
            Spelling::Double if !word.contains(['"', '$', '`', '\\', '!']) => format!("\"{word}\""),
            _ => single(),
        };
    }
    let at = |k: usize| {
        let chars: Vec<char> = word.chars().collect();
        k % (chars.len() + 1)
    };
    match spelling {
        Spelling::Bare => word.to_owned(),
        Spelling::Single => single(),
        Spelling::Double => format!("\"{word}\""),
        Spelling::EmptyQuotes(k) => {
            let (a, b) = word.split_at(at(k));
            format!("{a}''{b}")
        }
        Spelling::Backslash(k) => {
            let k = at(k).min(word.len() - 1);
            let (a, b) = word.split_at(k);
            format!("{a}\\{b}")
        }
    }
}

fn spelling() -> impl Strategy<Value = Spelling> {
    prop_oneof![
        Just(Spelling::Bare),
        Just(Spelling::Single),
        Just(Spelling::Double),
        (0usize..16).prop_map(Spelling::EmptyQuotes),
        (0usize..16).prop_map(Spelling::Backslash),
    ]
}

/// A respelling of `words`: each word spelled its own way, joined by varied whitespace.
fn respell(
    words: &[&str],
    spellings: &[Spelling],
    seps: &[&str],
    wrapper: &str,
    pad: (&str, &str),
) -> String {
    let mut out = format!("{}{wrapper}", pad.0);
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push_str(seps[i % seps.len()]);
        }
        out.push_str(&spell(w, spellings[i % spellings.len()]));
    }
    out.push_str(pad.1);
    out
}

fn canonical(words: &[&str], wrapper: &str) -> String {
    respell(words, &[Spelling::Bare], &[" "], wrapper, ("", ""))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn harmless_commands_stay_clean_however_they_are_quoted_or_spaced(
        cmd in select(HARMLESS),
        spellings in prop::collection::vec(spelling(), 1..6),
        seps in prop::collection::vec(select(SEPARATORS), 1..4),
        wrapper in select(WRAPPERS),
        pad in (select(&["", " ", "\t", "\n"][..]), select(&["", " ", ";", "\n"][..])),
    ) {
        let text = respell(cmd, &spellings, &seps, wrapper, pad);
        let v = guard::classify(&text);
        prop_assert!(v.is_clean(), "{text:?} -> {:?}", v.findings);
    }

    #[test]
    fn dangerous_commands_keep_their_tier_and_keys_however_they_are_quoted_or_spaced(
        (cmd, tier) in select(DANGEROUS),
        spellings in prop::collection::vec(spelling(), 1..6),
        seps in prop::collection::vec(select(SEPARATORS), 1..4),
        wrapper in select(WRAPPERS),
        pad in (select(&["", " ", "\t", "\n"][..]), select(&["", " ", ";", "\n"][..])),
    ) {
        let text = respell(cmd, &spellings, &seps, wrapper, pad);
        let v = guard::classify(&text);
        prop_assert_eq!(v.tier(), Some(tier), "{:?} -> {:?}", text, v.findings);
        let base = guard::classify(&canonical(cmd, wrapper));
        prop_assert_eq!(v.approval_keys(), base.approval_keys(), "{:?}", text);
    }

    #[test]
    fn arbitrary_text_never_panics_and_verdicts_stay_consistent(text in any::<String>()) {
        check_consistent(&text)?;
    }

    #[test]
    fn shell_shaped_noise_never_panics_and_verdicts_stay_consistent(
        tokens in prop::collection::vec(select(NOISE), 0..60),
    ) {
        check_consistent(&tokens.concat())?;
    }
}

/// Fragments that exercise the grammar's corners when glued together at random.
const NOISE: &[&str] = &[
    "rm",
    " -rf",
    " /",
    " ~",
    "$(",
    ")",
    "`",
    "'",
    "\"",
    "\\",
    " | ",
    " && ",
    "; ",
    "<<EOF\n",
    "\nEOF\n",
    "{ ",
    " }",
    "(",
    "bash -c ",
    "eval ",
    "$X",
    "${X:-",
    "}",
    "*",
    "\n",
    " ",
    "<(",
    ">",
    "2>&1",
    "sudo ",
    "xargs ",
    "find ",
    "-exec ",
    "{}",
    " +",
    " \\;",
    "if ",
    "then ",
    "fi",
    "for x in a; do ",
    "done",
    "case x in a) ",
    ";; esac",
    "$((",
    "))",
    ":",
    "&",
    "$'\\x72'",
    "f() ",
    "[[ ",
    " ]]",
    "<<<",
    "cd ",
    "..",
    "/dev/sda",
    "of=",
    "dd ",
    "echo ",
    "sh",
];

fn check_consistent(text: &str) -> Result<(), TestCaseError> {
    let v = guard::classify(text);
    if v.parse_error.is_some() {
        prop_assert!(!v.is_clean());
        prop_assert!(v.findings.iter().any(|f| f.id == "parse.unanalysed"));
    }
    prop_assert_eq!(v.is_hardline(), v.approval_keys().is_none());
    prop_assert_eq!(v.is_clean(), v.tier().is_none());
    prop_assert!(!(v.is_hardline() && v.needs_approval()));
    for f in &v.findings {
        prop_assert!(!f.id.is_empty() && !f.reason.is_empty());
    }
    Ok(())
}

#[test]
fn deeply_nested_input_is_refused_not_overflowed() {
    for n in [40, 200, 2_000] {
        for (open, close) in [
            ("(", ")"),
            ("$(", ")"),
            ("{ ", "; }"),
            ("if true; then ", "; fi"),
        ] {
            let text = format!("{}echo{}", open.repeat(n), close.repeat(n));
            let v = guard::classify(&text);
            assert!(!v.is_clean(), "{open}x{n}");
        }
        // Backquotes cannot nest without escapes; many of them must simply not crash.
        guard::classify(&format!("{}echo{}", "`".repeat(n), "`".repeat(n)));
    }
}

#[test]
fn nesting_hidden_by_ansi_c_escapes_inside_payloads_does_not_overflow() {
    // `$'\x28'` is `(`: the outer nesting estimate cannot see parentheses spelled this way,
    // so each payload level is checked again when it is parsed. Build as many levels as fit in
    // the length limit, each nested 30 deep, and run it on a default 2 MiB test thread.
    let mut cmd = format!("{}rm -rf /{}", "(".repeat(30), ")".repeat(30));
    loop {
        let encoded: String = cmd.bytes().map(|b| format!("\\x{b:02x}")).collect();
        let next = format!("{}bash -c $'{encoded}'{}", "(".repeat(30), ")".repeat(30));
        if next.len() > 60_000 {
            break;
        }
        cmd = next;
    }
    let v = guard::classify(&cmd);
    assert!(v.is_hardline(), "{:?}", v.findings);
}

#[test]
fn payloads_nested_beyond_the_limit_need_approval() {
    let mut cmd = "ls".to_owned();
    for _ in 0..12 {
        cmd = format!("bash -c {}", shell_single_quote(&cmd));
    }
    let v = guard::classify(&cmd);
    assert!(v.needs_approval(), "{:?}", v.findings);
}

#[test]
fn huge_input_is_refused_quickly() {
    let text = "echo a; ".repeat(20_000);
    let start = std::time::Instant::now();
    let v = guard::classify(&text);
    assert!(v.needs_approval());
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

fn shell_single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
