//! Runs the whole guard corpus (`guard_corpus.txt`) and prints a confusion summary: how many
//! commands of each expected verdict got each actual verdict, then every false positive,
//! false negative and missing rule id by line. Any mismatch fails the test.

use std::collections::BTreeMap;

use nestbox_exec::guard::{self, Tier, Verdict};

/// The three verdicts the corpus names, ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expect {
    Clean,
    Approval,
    Hardline,
}

impl Expect {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "clean" => Some(Expect::Clean),
            "approval" => Some(Expect::Approval),
            "hardline" => Some(Expect::Hardline),
            _ => None,
        }
    }

    fn of(v: &Verdict) -> Self {
        match v.tier() {
            None => Expect::Clean,
            Some(Tier::Approval) => Expect::Approval,
            Some(Tier::Hardline) => Expect::Hardline,
        }
    }
}

struct Case {
    line: usize,
    expect: Expect,
    id: Option<String>,
    command: String,
}

fn load() -> Vec<Case> {
    let text = include_str!("guard_corpus.txt");
    let mut cases = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (head, command) = line
            .split_once(" :: ")
            .unwrap_or_else(|| panic!("line {line_no}: missing ' :: ' separator"));
        let mut words = head.split_whitespace();
        let expect = words.next().and_then(Expect::parse).unwrap_or_else(|| {
            panic!("line {line_no}: verdict must be hardline, approval or clean")
        });
        let id = words.next().map(str::to_owned);
        cases.push(Case {
            line: line_no,
            expect,
            id,
            command: command.replace('⏎', "\n").replace('␀', "\0"),
        });
    }
    cases
}

#[test]
fn every_corpus_command_gets_its_expected_verdict() {
    let cases = load();
    assert!(
        cases.len() >= 150,
        "the corpus must hold at least 150 commands, has {}",
        cases.len()
    );

    let mut matrix: BTreeMap<(Expect, Expect), usize> = BTreeMap::new();
    let mut false_positives = Vec::new();
    let mut false_negatives = Vec::new();
    let mut wrong_rule = Vec::new();

    for case in &cases {
        let verdict = guard::classify(&case.command);
        let got = Expect::of(&verdict);
        *matrix.entry((case.expect, got)).or_default() += 1;
        let ids: Vec<&str> = verdict.findings.iter().map(|f| f.id).collect();
        let report = format!("line {}: {:?} -> {got:?} {ids:?}", case.line, case.command);
        if got > case.expect {
            false_positives.push(report);
        } else if got < case.expect {
            false_negatives.push(report);
        } else if let Some(id) = &case.id
            && !ids.contains(&id.as_str())
        {
            wrong_rule.push(format!("{report}, expected {id}"));
        }
    }

    println!("guard corpus: {} commands", cases.len());
    println!(
        "{:>10} | {:>8} {:>8} {:>8}   (rows: expected, columns: actual)",
        "", "clean", "approval", "hardline"
    );
    for expect in [Expect::Clean, Expect::Approval, Expect::Hardline] {
        let cell = |got| matrix.get(&(expect, got)).copied().unwrap_or(0);
        println!(
            "{:>10} | {:>8} {:>8} {:>8}",
            format!("{expect:?}").to_lowercase(),
            cell(Expect::Clean),
            cell(Expect::Approval),
            cell(Expect::Hardline)
        );
    }
    for (title, list) in [
        ("false positives (stricter than expected)", &false_positives),
        ("false negatives (laxer than expected)", &false_negatives),
        ("right tier, expected rule missing", &wrong_rule),
    ] {
        println!("{title}: {}", list.len());
        for item in list.iter() {
            println!("  {item}");
        }
    }
    assert!(
        false_positives.is_empty() && false_negatives.is_empty() && wrong_rule.is_empty(),
        "{} false positives, {} false negatives, {} wrong rules (run with --nocapture for the list)",
        false_positives.len(),
        false_negatives.len(),
        wrong_rule.len()
    );
}

#[test]
fn corpus_has_hardline_approval_and_clean_commands() {
    let cases = load();
    for expect in [Expect::Clean, Expect::Approval, Expect::Hardline] {
        assert!(
            cases.iter().filter(|c| c.expect == expect).count() >= 30,
            "{expect:?}"
        );
    }
}
