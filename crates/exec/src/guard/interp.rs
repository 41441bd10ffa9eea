//! Programs that run code given to them: shells (whose code the guard parses again) and other
//! interpreters (whose code it can only skim).

use super::word::Arg;

/// Shells whose code is shell code the guard can parse.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash", "fish",
];

/// True when `program` is a shell.
pub(crate) fn is_shell(program: &str) -> bool {
    SHELLS.contains(&program)
}

/// Where a shell or interpreter takes its code from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CodeFrom {
    /// An argument (`bash -c CODE`, `python -c CODE`, `perl -e CODE`), by index into the args.
    Arg(usize),
    /// Standard input (`bash`, `bash -s`, `python -`).
    Stdin,
    /// A script operand, by index into the args (a file the guard cannot read, or a process
    /// substitution it can).
    File(usize),
    /// Nothing runs (`python -m venv`, `bash --version`) or the code is not reachable.
    Nothing,
}

/// Where a shell takes its code from, given its arguments (after the program name).
pub(crate) fn shell_code(args: &[Arg]) -> CodeFrom {
    let mut command_mode = false;
    let mut stdin_mode = false;
    let mut i = 0;
    while i < args.len() {
        let Some(v) = args[i].value() else {
            return if command_mode {
                CodeFrom::Arg(i)
            } else {
                CodeFrom::File(i)
            };
        };
        if v == "--" || v == "-" {
            i += 1;
            break;
        }
        if let Some(long) = v.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                i += 1;
            }
            if matches!(long, "version" | "help") {
                return CodeFrom::Nothing;
            }
            i += 1;
            continue;
        }
        if v.len() > 1 && (v.starts_with('-') || v.starts_with('+')) {
            let cluster = &v[1..];
            if v.starts_with('-') && cluster.contains('c') {
                command_mode = true;
            }
            if cluster.contains('s') {
                stdin_mode = true;
            }
            // `-o name` and `-O name` take the next word.
            i += 1 + cluster.chars().filter(|c| matches!(c, 'o' | 'O')).count();
            continue;
        }
        break;
    }
    if command_mode {
        return if i < args.len() {
            CodeFrom::Arg(i)
        } else {
            CodeFrom::Nothing
        };
    }
    if stdin_mode || i >= args.len() {
        return CodeFrom::Stdin;
    }
    match args[i].value() {
        Some("/dev/stdin") => CodeFrom::Stdin,
        _ => CodeFrom::File(i),
    }
}

/// An interpreter other than a shell, and the flags that take inline code.
struct Interpreter {
    /// Flags whose value is code (`-c` for python, `-e` for perl).
    code_flags: &'static [&'static str],
    /// Short flags that take a (non-code) value.
    short_with_value: &'static str,
    /// Flags after which no code is read from stdin or a file (`python -m mod`).
    module_flags: &'static [&'static str],
}

fn interpreter(program: &str) -> Option<Interpreter> {
    let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match base {
        "python" | "pypy" => Interpreter {
            code_flags: &["-c"],
            short_with_value: "QWX",
            module_flags: &["-m"],
        },
        "perl" => Interpreter {
            code_flags: &["-e", "-E"],
            short_with_value: "IMmx",
            module_flags: &[],
        },
        "ruby" => Interpreter {
            code_flags: &["-e"],
            short_with_value: "IrCE",
            module_flags: &[],
        },
        "node" | "nodejs" | "bun" | "deno" => Interpreter {
            code_flags: &["-e", "--eval", "-p", "--print", "eval"],
            short_with_value: "r",
            module_flags: &[],
        },
        "php" => Interpreter {
            code_flags: &["-r"],
            short_with_value: "cdz",
            module_flags: &[],
        },
        "lua" | "luajit" => Interpreter {
            code_flags: &["-e"],
            short_with_value: "l",
            module_flags: &[],
        },
        _ => return None,
    })
}

fn is_awk(program: &str) -> bool {
    matches!(program, "awk" | "gawk" | "mawk" | "nawk")
}

/// True when `program` is an interpreter the guard knows (but cannot parse).
pub(crate) fn is_interpreter(program: &str) -> bool {
    interpreter(program).is_some() || is_awk(program)
}

/// awk takes its program as the first operand unless `-f file` names one.
fn awk_code(args: &[Arg]) -> CodeFrom {
    let mut i = 0;
    while i < args.len() {
        match args[i].value() {
            Some("-f") | Some("--file") => return CodeFrom::File(i + 1),
            Some("--") => {
                return if i + 1 < args.len() {
                    CodeFrom::Arg(i + 1)
                } else {
                    CodeFrom::Nothing
                };
            }
            Some("-F" | "-v" | "--field-separator" | "--assign") => i += 2,
            Some(v) if v.starts_with('-') && v.len() > 1 => i += 1,
            _ => return CodeFrom::Arg(i),
        }
    }
    CodeFrom::Nothing
}

/// Where an interpreter takes its code from. Inline code may be bundled (`perl -pie CODE`).
pub(crate) fn interpreter_code(program: &str, args: &[Arg]) -> CodeFrom {
    if is_awk(program) {
        return awk_code(args);
    }
    let Some(spec) = interpreter(program) else {
        return CodeFrom::Nothing;
    };
    let mut i = 0;
    while i < args.len() {
        let Some(v) = args[i].value() else {
            return CodeFrom::File(i);
        };
        if v == "-" {
            return CodeFrom::Stdin;
        }
        if v == "--" {
            i += 1;
            break;
        }
        if spec.code_flags.contains(&v) {
            return if i + 1 < args.len() {
                CodeFrom::Arg(i + 1)
            } else {
                CodeFrom::Nothing
            };
        }
        if spec.module_flags.contains(&v) {
            return CodeFrom::Nothing;
        }
        if v.starts_with("--") {
            i += 1;
            continue;
        }
        if let Some(cluster) = v.strip_prefix('-').filter(|c| !c.is_empty()) {
            // A bundled cluster ending in a code flag takes the next word as code.
            let last = cluster.chars().last().unwrap_or(' ');
            let bundled_code = spec
                .code_flags
                .iter()
                .any(|f| f.len() == 2 && f.ends_with(last));
            if bundled_code && cluster.len() > 1 && cluster.chars().all(|c| c.is_ascii_alphabetic())
            {
                return if i + 1 < args.len() {
                    CodeFrom::Arg(i + 1)
                } else {
                    CodeFrom::Nothing
                };
            }
            let takes_value = cluster.len() == 1 && spec.short_with_value.contains(cluster);
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        return CodeFrom::File(i);
    }
    if i < args.len() {
        CodeFrom::File(i)
    } else {
        CodeFrom::Stdin
    }
}

/// Calls in interpreter code that start processes or delete directory trees: the guard cannot
/// follow what they run, so they need a human's look.
const SPAWNING_CALLS: &[&str] = &[
    "system(",
    "popen",
    "subprocess",
    "os.exec",
    "pty.spawn",
    "spawn(",
    "spawnsync",
    "execsync",
    "child_process",
    "rmtree",
    "rm_rf",
    "rmsync",
    "kernel.exec",
    "shell_exec",
    "passthru(",
    "proc_open",
    "io.popen",
    "os.execute",
];

/// True when interpreter code calls out to processes or deletes trees.
pub(crate) fn code_spawns(program: &str, code: &str) -> bool {
    let lower = code.to_ascii_lowercase();
    if SPAWNING_CALLS.iter().any(|c| lower.contains(c)) {
        return true;
    }
    // awk runs commands through pipes: `print | "sh"`, `"cmd" | getline`.
    if is_awk(program)
        && (lower.contains("| \"") || lower.contains("|\"") || lower.contains("getline"))
    {
        return true;
    }
    // Perl and Ruby run backquoted text as a shell command.
    let backticks = matches!(
        program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.'),
        "perl" | "ruby"
    );
    backticks && (code.contains('`') || lower.contains("qx"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Arg> {
        s.split_whitespace().map(|w| Arg::literal(w, w)).collect()
    }

    #[test]
    fn shell_code_comes_from_c_payload_stdin_or_file() {
        assert_eq!(shell_code(&args("-c x")), CodeFrom::Arg(1));
        assert_eq!(shell_code(&args("-lc x")), CodeFrom::Arg(1));
        assert_eq!(shell_code(&args("-e -o pipefail -c x")), CodeFrom::Arg(4));
        assert_eq!(shell_code(&args("--norc -c x")), CodeFrom::Arg(2));
        assert_eq!(shell_code(&args("")), CodeFrom::Stdin);
        assert_eq!(shell_code(&args("-s -- a b")), CodeFrom::Stdin);
        assert_eq!(shell_code(&args("-")), CodeFrom::Stdin);
        assert_eq!(shell_code(&args("install.sh arg")), CodeFrom::File(0));
        assert_eq!(shell_code(&args("--version")), CodeFrom::Nothing);
    }

    #[test]
    fn interpreter_code_is_located() {
        assert_eq!(interpreter_code("python3", &args("-c x")), CodeFrom::Arg(1));
        assert_eq!(
            interpreter_code("python3.12", &args("-u -c x")),
            CodeFrom::Arg(2)
        );
        assert_eq!(
            interpreter_code("python3", &args("-m pytest")),
            CodeFrom::Nothing
        );
        assert_eq!(interpreter_code("python3", &args("")), CodeFrom::Stdin);
        assert_eq!(interpreter_code("python3", &args("-")), CodeFrom::Stdin);
        assert_eq!(
            interpreter_code("python3", &args("script.py")),
            CodeFrom::File(0)
        );
        assert_eq!(
            interpreter_code("perl", &args("-pie s/a/b/ f")),
            CodeFrom::Arg(1)
        );
        assert_eq!(interpreter_code("node", &args("-e x")), CodeFrom::Arg(1));
    }

    #[test]
    fn spawning_code_is_recognised() {
        assert!(code_spawns("python3", "import os; os.system('rm -rf /')"));
        assert!(code_spawns("perl", "print `id`"));
        assert!(!code_spawns("python3", "import sys; print(sys.version)"));
        assert!(code_spawns("awk", "BEGIN { system(\"id\") }"));
        assert!(code_spawns("awk", "{ print | \"sh\" }"));
        assert!(!code_spawns("awk", "{ print $1 }"));
        assert_eq!(
            interpreter_code("awk", &args("-F : { print }")),
            CodeFrom::Arg(2)
        );
    }
}
