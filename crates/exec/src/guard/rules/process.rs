//! Taking the machine's processes down: signalling every process, fork bombs.

use super::super::Tier;
use super::super::command::Invocation;
use super::Rule;

pub(crate) const KILL_ALL: Rule = Rule {
    id: "process.kill_all",
    tier: Tier::Hardline,
    reason: "signals every process the user can reach (`kill -1`)",
};

pub(crate) const FORK_BOMB: Rule = Rule {
    id: "process.fork_bomb",
    tier: Tier::Hardline,
    reason: "a function that starts copies of itself in a pipeline or in the background (fork bomb)",
};

/// Checks `kill`.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    if program != "kill" {
        return;
    }
    let args = inv.args();
    let mut signal_given = false;
    let mut after_dashdash = false;
    let mut i = 0;
    while i < args.len() {
        let Some(v) = args[i].value() else {
            i += 1;
            continue;
        };
        if !after_dashdash {
            match v {
                "--" => {
                    after_dashdash = true;
                    i += 1;
                    continue;
                }
                "-l" | "-L" | "--list" | "--table" => return,
                "-s" | "-n" | "--signal" if !signal_given => {
                    signal_given = true;
                    i += 2;
                    continue;
                }
                // The first dash word is the signal (`-9`, `-KILL`); after it, a dash word is a
                // negative pid, and `-1` means every process.
                v if v.starts_with('-') && !signal_given => {
                    signal_given = true;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        if v == "-1" {
            sink.hit(&KILL_ALL, &inv.site);
            return;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn killing_every_process_is_hardline() {
        for cmd in [
            "kill -9 -1",
            "kill -KILL -1",
            "kill -s KILL -1",
            "kill -- -1",
            "sudo kill -SIGTERM -1",
        ] {
            assert_finds(cmd, "process.kill_all", Tier::Hardline);
        }
    }

    #[test]
    fn killing_one_process_is_clean() {
        assert_clean("kill -9 12345");
        assert_clean("kill -1 12345");
        assert_clean("kill %1");
        assert_clean("kill -l");
    }

    #[test]
    fn fork_bombs_are_hardline() {
        assert_finds(":(){ :|:& };:", "process.fork_bomb", Tier::Hardline);
        assert_finds(
            "bomb() { bomb | bomb & }; bomb",
            "process.fork_bomb",
            Tier::Hardline,
        );
        assert_finds("f(){ f & f; }; f", "process.fork_bomb", Tier::Hardline);
        assert_clean("f() { echo hi; }; f | cat");
    }
}
