//! Programs that run another program: `sudo rm -rf /` is `rm -rf /`, and so are
//! `env X=1 rm`, `timeout 5 rm`, `nice -n 5 rm`, `busybox rm` and `xargs rm` (with more
//! arguments to come). Peeling them is what stops the "hide it behind a wrapper" bypasses that
//! text patterns keep missing.

use super::command::basename;
use super::word::Arg;

/// What is left after peeling wrappers off an argv.
#[derive(Debug, Default)]
pub(crate) struct Peeled {
    /// Index of the program that really runs; `None` when the wrappers run no program of
    /// their own (`sudo -l`, `env`, `su -c '...'`, `command -v rm`).
    pub start: Option<usize>,
    /// Some wrapper raises privileges.
    pub elevated: bool,
    /// `xargs` appends arguments read at run time.
    pub appends_input: bool,
    /// A string a wrapper replaces with run-time input (`xargs -I {}`).
    pub placeholder: Option<String>,
    /// Shell text a wrapper hands to `sh -c` or splits itself (`su -c`, `env -S`, `watch`,
    /// `flock -c`).
    pub payloads: Vec<Arg>,
}

/// How a wrapper takes its options.
struct Options {
    /// Short options that take a value (`-u root`, `-uroot`).
    short_with_value: &'static str,
    /// Long options that take a value when not written with `=`.
    long_with_value: &'static [&'static str],
}

const NO_VALUES: Options = Options {
    short_with_value: "",
    long_with_value: &[],
};

/// One option seen while scanning.
struct Opt<'a> {
    name: String,
    value: Option<&'a Arg>,
    inline_value: Option<String>,
}

impl Opt<'_> {
    fn value_text(&self) -> Option<String> {
        self.inline_value
            .clone()
            .or_else(|| self.value.and_then(|a| a.value().map(str::to_owned)))
    }
}

/// Scans options from `i`; returns the index of the first operand (or `argv.len()`).
fn scan<'a>(argv: &'a [Arg], mut i: usize, spec: &Options, mut seen: impl FnMut(Opt<'a>)) -> usize {
    while i < argv.len() {
        let Some(v) = argv[i].value() else { return i };
        if v == "--" {
            return i + 1;
        }
        if let Some(long) = v.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, val)) => (n, Some(val.to_owned())),
                None => (long, None),
            };
            let takes = inline.is_none() && spec.long_with_value.contains(&name);
            let value = if takes { argv.get(i + 1) } else { None };
            seen(Opt {
                name: format!("--{name}"),
                value,
                inline_value: inline,
            });
            i += if takes { 2 } else { 1 };
            continue;
        }
        if v.len() > 1 && v.starts_with('-') {
            let cluster: Vec<char> = v.chars().skip(1).collect();
            let mut step = 1;
            for (k, c) in cluster.iter().enumerate() {
                if spec.short_with_value.contains(*c) {
                    let rest: String = cluster[k + 1..].iter().collect();
                    if rest.is_empty() {
                        seen(Opt {
                            name: format!("-{c}"),
                            value: argv.get(i + 1),
                            inline_value: None,
                        });
                        step = 2;
                    } else {
                        seen(Opt {
                            name: format!("-{c}"),
                            value: None,
                            inline_value: Some(rest),
                        });
                    }
                    break;
                }
                seen(Opt {
                    name: format!("-{c}"),
                    value: None,
                    inline_value: None,
                });
            }
            i += step;
            continue;
        }
        return i;
    }
    i
}

/// True when `v` looks like `NAME=value` (an environment assignment for `env`).
fn is_assignment(v: &str) -> bool {
    match v.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Arguments joined with spaces into one piece of shell text, as `watch` and `ssh` do.
fn joined(args: &[Arg]) -> Arg {
    let raw: Vec<&str> = args.iter().map(|a| a.raw.as_str()).collect();
    let raw = raw.join(" ");
    let values: Option<Vec<&str>> = args.iter().map(Arg::value).collect();
    match values {
        Some(v) => Arg::literal(&raw, &v.join(" ")),
        None => {
            let mut a = Arg::unknown(&raw);
            a.fetched = args.iter().any(|a| a.fetched);
            a
        }
    }
}

/// Peels wrappers off `argv`, outermost first.
pub(crate) fn peel(argv: &[Arg]) -> Peeled {
    let mut out = Peeled::default();
    let mut i = 0;
    // Each round removes one wrapper; the bound only guards against a bug looping forever.
    for _ in 0..argv.len() + 1 {
        let Some(first) = argv.get(i) else {
            out.start = None;
            return out;
        };
        let Some(name) = first.value().map(|v| basename(v).to_ascii_lowercase()) else {
            out.start = Some(i);
            return out;
        };
        let next = match name.as_str() {
            "sudo" => {
                out.elevated = true;
                let mut edits = false;
                let spec = Options {
                    short_with_value: "CDghprTtUu",
                    long_with_value: &[
                        "close-from",
                        "chdir",
                        "group",
                        "host",
                        "prompt",
                        "chroot",
                        "role",
                        "type",
                        "command-timeout",
                        "other-user",
                        "user",
                    ],
                };
                let j = scan(argv, i + 1, &spec, |o| {
                    if matches!(
                        o.name.as_str(),
                        "-e" | "--edit"
                            | "-l"
                            | "--list"
                            | "-v"
                            | "--validate"
                            | "-V"
                            | "--version"
                            | "-K"
                            | "-k"
                    ) {
                        edits = true;
                    }
                });
                if edits { None } else { Some(j) }
            }
            "doas" | "pkexec" | "run0" => {
                out.elevated = true;
                let spec = Options {
                    short_with_value: "uCDg",
                    long_with_value: &["user", "chdir", "setenv", "unit", "description"],
                };
                Some(scan(argv, i + 1, &spec, |_| {}))
            }
            "su" | "runuser" => {
                out.elevated = true;
                let spec = Options {
                    short_with_value: "cgGsuw",
                    long_with_value: &[
                        "command",
                        "session-command",
                        "group",
                        "supp-group",
                        "shell",
                        "user",
                        "whitelist-environment",
                    ],
                };
                let mut user_form = false;
                let mut on_opt = |o: Opt<'_>| match o.name.as_str() {
                    "-c" | "--command" | "--session-command" => {
                        if let Some(a) = o.value {
                            out.payloads.push(a.clone());
                        } else if let Some(t) = o.inline_value {
                            out.payloads.push(Arg::literal(&t, &t));
                        }
                    }
                    "-u" | "--user" if name == "runuser" => user_form = true,
                    _ => {}
                };
                let j = scan(argv, i + 1, &spec, &mut on_opt);
                // su permutes its options: `su root -c cmd` is common. Keep scanning past the
                // user name for a `-c`.
                let mut k = j;
                while k < argv.len() {
                    k = scan(argv, k + 1, &spec, &mut on_opt);
                }
                // `runuser -u user cmd...` runs cmd; `su [user]` only starts a login shell.
                if user_form { Some(j) } else { None }
            }
            "env" => {
                let spec = Options {
                    short_with_value: "uCS",
                    long_with_value: &[
                        "unset",
                        "chdir",
                        "split-string",
                        "default-signal",
                        "ignore-signal",
                        "block-signal",
                    ],
                };
                let j = scan(argv, i + 1, &spec, |o| {
                    if matches!(o.name.as_str(), "-S" | "--split-string") {
                        if let Some(a) = o.value {
                            out.payloads.push(a.clone());
                        } else if let Some(t) = o.inline_value {
                            out.payloads.push(Arg::literal(&t, &t));
                        }
                    }
                });
                let mut j = j;
                while argv.get(j).and_then(Arg::value).is_some_and(is_assignment) {
                    j += 1;
                }
                Some(j)
            }
            "nohup" | "eatmydata" | "unbuffer" | "torsocks" | "proxychains" | "proxychains4"
            | "catchsegv" | "builtin" => Some(scan(argv, i + 1, &NO_VALUES, |_| {})),
            "fakeroot" => Some(scan(
                argv,
                i + 1,
                &Options {
                    short_with_value: "ils",
                    long_with_value: &["lib", "faked", "unknown-is-real"],
                },
                |_| {},
            )),
            "time" => Some(scan(
                argv,
                i + 1,
                &Options {
                    short_with_value: "fo",
                    long_with_value: &["format", "output"],
                },
                |_| {},
            )),
            "setsid" => Some(scan(argv, i + 1, &NO_VALUES, |_| {})),
            "nice" => Some(scan(
                argv,
                i + 1,
                &Options {
                    short_with_value: "n",
                    long_with_value: &["adjustment"],
                },
                |_| {},
            )),
            "ionice" => {
                let mut pid_mode = false;
                let j = scan(
                    argv,
                    i + 1,
                    &Options {
                        short_with_value: "cnPpu",
                        long_with_value: &["class", "classdata", "pid", "pgid", "uid"],
                    },
                    |o| {
                        if matches!(
                            o.name.as_str(),
                            "-p" | "-P" | "-u" | "--pid" | "--pgid" | "--uid"
                        ) {
                            pid_mode = true;
                        }
                    },
                );
                if pid_mode { None } else { Some(j) }
            }
            "stdbuf" => Some(scan(
                argv,
                i + 1,
                &Options {
                    short_with_value: "ioe",
                    long_with_value: &["input", "output", "error"],
                },
                |_| {},
            )),
            "timeout" => {
                let j = scan(
                    argv,
                    i + 1,
                    &Options {
                        short_with_value: "ks",
                        long_with_value: &["kill-after", "signal"],
                    },
                    |_| {},
                );
                // The first operand is the duration.
                Some(j + 1)
            }
            "chrt" | "taskset" => {
                let mut pid_mode = false;
                let j = scan(
                    argv,
                    i + 1,
                    &Options {
                        short_with_value: "TPD",
                        long_with_value: &["sched-runtime", "sched-period", "sched-deadline"],
                    },
                    |o| {
                        if matches!(o.name.as_str(), "-p" | "--pid") {
                            pid_mode = true;
                        }
                    },
                );
                // Then a priority (chrt) or a CPU mask (taskset).
                if pid_mode { None } else { Some(j + 1) }
            }
            "command" => {
                let mut lookup = false;
                let j = scan(argv, i + 1, &NO_VALUES, |o| {
                    if matches!(o.name.as_str(), "-v" | "-V") {
                        lookup = true;
                    }
                });
                if lookup { None } else { Some(j) }
            }
            "exec" => Some(scan(
                argv,
                i + 1,
                &Options {
                    short_with_value: "a",
                    long_with_value: &[],
                },
                |_| {},
            )),
            "busybox" | "toybox" => match argv.get(i + 1).and_then(Arg::value) {
                Some(v) if v.starts_with('-') => None,
                _ => Some(i + 1),
            },
            "chroot" => {
                let j = scan(
                    argv,
                    i + 1,
                    &Options {
                        short_with_value: "",
                        long_with_value: &["userspec", "groups"],
                    },
                    |_| {},
                );
                // The first operand is the new root; without a command it starts a shell.
                Some(j + 1)
            }
            "flock" => {
                let spec = Options {
                    short_with_value: "Ewc",
                    long_with_value: &["conflict-exit-code", "wait", "timeout", "command"],
                };
                let mut has_command = false;
                let j = scan(argv, i + 1, &spec, |o| {
                    if matches!(o.name.as_str(), "-c" | "--command") {
                        has_command = true;
                        if let Some(a) = o.value {
                            out.payloads.push(a.clone());
                        } else if let Some(t) = o.inline_value {
                            out.payloads.push(Arg::literal(&t, &t));
                        }
                    }
                });
                // The first operand is the lock file; a later `-c` may follow it.
                let j = j + 1;
                if argv.get(j).is_some_and(|a| a.is("-c") || a.is("--command")) {
                    if let Some(a) = argv.get(j + 1) {
                        out.payloads.push(a.clone());
                    }
                    None
                } else if has_command {
                    None
                } else {
                    Some(j)
                }
            }
            "watch" => {
                let mut exec_mode = false;
                let j = scan(
                    argv,
                    i + 1,
                    &Options {
                        short_with_value: "nq",
                        long_with_value: &["interval", "equexit"],
                    },
                    |o| {
                        if matches!(o.name.as_str(), "-x" | "--exec") {
                            exec_mode = true;
                        }
                    },
                );
                if exec_mode {
                    Some(j)
                } else {
                    // watch joins its arguments and hands them to `sh -c`.
                    let rest = argv.get(j..).unwrap_or(&[]);
                    if !rest.is_empty() {
                        out.payloads.push(joined(rest));
                    }
                    None
                }
            }
            "ssh" => {
                // `ssh host cmd...` runs cmd through the remote user's shell.
                let spec = Options {
                    short_with_value: "BbcDEeFIiJLlmOopQRSWw",
                    long_with_value: &[],
                };
                let j = scan(argv, i + 1, &spec, |_| {});
                let rest = argv.get(j + 1..).unwrap_or(&[]);
                if !rest.is_empty() {
                    out.payloads.push(joined(rest));
                }
                None
            }
            "xargs" => {
                let spec = Options {
                    short_with_value: "adEILnPs",
                    long_with_value: &[
                        "arg-file",
                        "delimiter",
                        "max-args",
                        "max-procs",
                        "max-chars",
                        "process-slot-var",
                    ],
                };
                let mut placeholder = None;
                let j = scan(argv, i + 1, &spec, |o| match o.name.as_str() {
                    "-I" => placeholder = o.value_text(),
                    "-i" | "--replace" => {
                        placeholder =
                            Some(o.inline_value.clone().unwrap_or_else(|| "{}".to_owned()))
                    }
                    _ => {}
                });
                out.appends_input = placeholder.is_none();
                if placeholder.is_some() {
                    out.placeholder = placeholder;
                }
                if j >= argv.len() {
                    // Without a command xargs runs echo.
                    None
                } else {
                    Some(j)
                }
            }
            _ => {
                out.start = Some(i);
                return out;
            }
        };
        match next {
            Some(j) if j < argv.len() => i = j,
            _ => {
                out.start = None;
                return out;
            }
        }
    }
    out.start = None;
    out
}

/// Where `find` runs other programs: each `-exec`/`-execdir`/`-ok`/`-okdir` clause, as a range
/// of `argv` (the program first, the `;` or `+` excluded).
pub(crate) fn find_exec_clauses(argv: &[Arg]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        if argv[i]
            .value()
            .is_some_and(|v| matches!(v, "-exec" | "-execdir" | "-ok" | "-okdir"))
        {
            let start = i + 1;
            let mut end = start;
            while end < argv.len() && !argv[end].value().is_some_and(|v| v == ";" || v == "+") {
                end += 1;
            }
            if start < end {
                out.push(start..end);
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<Arg> {
        s.split_whitespace().map(|w| Arg::literal(w, w)).collect()
    }

    fn program(s: &str) -> Option<String> {
        let a = argv(s);
        peel(&a).start.and_then(|i| a[i].value().map(str::to_owned))
    }

    #[test]
    fn wrappers_are_peeled_down_to_the_real_program() {
        assert_eq!(program("sudo -u bob rm -rf x").as_deref(), Some("rm"));
        assert_eq!(program("env -i A=1 B=2 rm x").as_deref(), Some("rm"));
        assert_eq!(program("timeout -s KILL 5 dd if=x").as_deref(), Some("dd"));
        assert_eq!(
            program("nice -n 10 ionice -c 3 nohup stdbuf -oL rm x").as_deref(),
            Some("rm")
        );
        assert_eq!(
            program("/usr/bin/sudo /usr/bin/env rm").as_deref(),
            Some("rm")
        );
        assert_eq!(program("busybox rm -rf x").as_deref(), Some("rm"));
        assert_eq!(program("command rm x").as_deref(), Some("rm"));
        assert_eq!(program("exec -a name rm x").as_deref(), Some("rm"));
        assert_eq!(program("xargs -0 -n 1 rm -rf").as_deref(), Some("rm"));
    }

    #[test]
    fn wrappers_that_run_nothing_yield_no_program() {
        assert_eq!(program("sudo -l"), None);
        assert_eq!(program("command -v rm"), None);
        assert_eq!(program("env"), None);
        assert_eq!(program("xargs"), None);
    }

    #[test]
    fn wrapper_payloads_are_collected() {
        let a = argv("su root -c reboot");
        let p = peel(&a);
        assert_eq!(p.start, None);
        assert_eq!(p.payloads[0].value(), Some("reboot"));
        let a = argv("env -S x");
        assert_eq!(peel(&a).payloads[0].value(), Some("x"));
    }

    #[test]
    fn xargs_marks_its_input() {
        let a = argv("xargs rm");
        assert!(peel(&a).appends_input);
        let a = argv("xargs -I {} rm {}");
        let p = peel(&a);
        assert_eq!(p.placeholder.as_deref(), Some("{}"));
        assert!(!p.appends_input);
    }

    #[test]
    fn find_exec_clauses_are_found() {
        let a = argv("find . -name x -exec rm -rf {} ; -print");
        let c = find_exec_clauses(&a);
        assert_eq!(c, vec![5..8]);
    }
}
