//! Following the code a command runs: wrappers peeled, rules applied, then the shell code it
//! hands to a shell, an interpreter, `eval`, `source`, `trap`, `alias` or `find -exec` walked
//! in turn.

use super::super::command::{Cwd, Invocation, Site, Stdin, Upstream, WriteTarget, operands};
use super::super::interp::{self, CodeFrom};
use super::super::rules::{self, exec, process};
use super::super::word::Arg;
use super::super::wrappers;
use super::{Ctx, Walker};

impl Walker {
    /// Runs the rules on one argv (as written, wrappers included) and follows the code it runs.
    pub(super) fn run(
        &mut self,
        argv: Vec<Arg>,
        site: Site,
        stdin: Stdin,
        writes: Vec<WriteTarget>,
        process_subs: &[(usize, Vec<Upstream>)],
        ctx: &Ctx,
    ) -> Vec<Upstream> {
        let peeled = wrappers::peel(&argv);
        let elevated = ctx.elevated || peeled.elevated;
        let mut inner = ctx.clone();
        inner.elevated = elevated;
        if peeled.placeholder.is_some() {
            inner.placeholder = peeled.placeholder.clone();
        }
        for payload in &peeled.payloads {
            self.payload(payload, &site, &stdin, &inner);
        }
        let start = peeled.start.unwrap_or(argv.len());
        let written = argv[start.min(argv.len())..].to_vec();
        // Arguments that carry a run-time item are unknown to the rules.
        let effective: Vec<Arg> = match &peeled.placeholder {
            Some(p) if !p.is_empty() => written
                .iter()
                .enumerate()
                .map(|(i, a)| match a.value() {
                    Some(v) if i > 0 && v.contains(p.as_str()) => Arg::unknown(&a.raw),
                    _ => a.clone(),
                })
                .collect(),
            _ => written.clone(),
        };
        let inv = Invocation {
            argv: effective,
            site,
            stdin,
            writes,
            elevated,
            appends_input: peeled.appends_input,
            cwd: self.cwd.clone(),
        };
        if let Some(first) = inv.argv.first()
            && first.value().is_none()
        {
            let rule = if first.fetched {
                &exec::DOWNLOAD_AS_CODE
            } else {
                &exec::DYNAMIC_PROGRAM
            };
            self.sink.hit(rule, &inv.site);
        }
        rules::check(&inv, &mut self.sink);
        if inv.program().is_none() && written.get(1).is_some_and(|a| a.is("-c")) {
            // `$SHELL -c CODE`: whatever the shell is, the code is readable.
            if let Some(code) = written.get(2) {
                self.payload(code, &inv.site, &inv.stdin, &inner);
            }
        }
        let program = inv.program();
        match program.as_deref() {
            Some("cd" | "pushd") => {
                let target = operands(inv.args()).next();
                self.cwd = match target {
                    Some(t) => self.cwd.after_cd(t.value()),
                    None => Cwd::Known("~".to_owned()),
                };
            }
            Some("popd") => self.cwd = Cwd::Unknown,
            _ => {}
        }
        if let (Some(f), Some(p)) = (&ctx.function, &program)
            && f == p
            && (ctx.in_pipeline || ctx.background)
        {
            self.sink.hit(&process::FORK_BOMB, &inv.site);
        }
        if let Some(p) = &program {
            // Process substitutions as arguments of the program, re-indexed after peeling.
            let subs: Vec<(usize, &Vec<Upstream>)> = process_subs
                .iter()
                .filter(|(i, _)| *i >= start)
                .map(|(i, out)| (i - start, out))
                .collect();
            self.code(p, &inv, &written, &subs, &inner);
            if p == "find" {
                let mut c = inner.clone();
                c.placeholder = Some("{}".to_owned());
                for range in wrappers::find_exec_clauses(&inv.argv) {
                    let clause: Vec<Arg> = written[range.clone()]
                        .iter()
                        .map(|a| match a.value() {
                            Some(v) if v.contains("{}") => Arg::unknown(&a.raw),
                            _ => a.clone(),
                        })
                        .collect();
                    // Payload text inside the clause (`sh -c '... {}'`) keeps the raw words.
                    let mut c2 = c.clone();
                    c2.stdin = Stdin::Opaque;
                    self.run_clause(clause, &written[range], inv.site.clone(), &c2);
                }
            }
        }
        vec![Upstream {
            output: exec::output_of(&inv),
            site: inv.site,
        }]
    }

    /// Runs a `find -exec` clause: rules see `{}` as unknown, payload text sees a run-time item.
    fn run_clause(&mut self, clause: Vec<Arg>, written: &[Arg], site: Site, ctx: &Ctx) {
        let peeled = wrappers::peel(written);
        let inv = Invocation {
            argv: clause[peeled.start.unwrap_or(clause.len()).min(clause.len())..].to_vec(),
            site,
            stdin: Stdin::Opaque,
            writes: Vec::new(),
            elevated: ctx.elevated || peeled.elevated,
            appends_input: false,
            cwd: self.cwd.clone(),
        };
        rules::check(&inv, &mut self.sink);
        if let Some(p) = inv.program() {
            let written = &written[peeled.start.unwrap_or(written.len()).min(written.len())..];
            self.code(&p, &inv, written, &[], ctx);
        }
    }

    /// Follows the code a program runs: shells, interpreters, `eval`, `source`, `trap`, `alias`.
    fn code(
        &mut self,
        program: &str,
        inv: &Invocation,
        written: &[Arg],
        process_subs: &[(usize, &Vec<Upstream>)],
        ctx: &Ctx,
    ) {
        let args = written.get(1..).unwrap_or(&[]);
        let sub_at = |i: usize| {
            process_subs
                .iter()
                .find(|(j, _)| *j == i + 1)
                .map(|(_, o)| *o)
        };
        if interp::is_shell(program) {
            match interp::shell_code(args) {
                CodeFrom::Arg(i) => self.payload(&args[i], &inv.site, &inv.stdin, ctx),
                CodeFrom::Stdin => self.feed_stdin(&inv.stdin, &inv.site, ctx, true),
                CodeFrom::File(i) => {
                    if let Some(out) = sub_at(i) {
                        self.feed(out, &inv.site, ctx, false);
                    }
                }
                CodeFrom::Nothing => {}
            }
            return;
        }
        if interp::is_interpreter(program) {
            match interp::interpreter_code(program, args) {
                CodeFrom::Arg(i) => match args[i].value() {
                    Some(code) if interp::code_spawns(program, code) => {
                        self.sink.hit(&rules::exec::INLINE_SPAWN, &inv.site);
                    }
                    Some(_) => {}
                    None => self.payload(&args[i], &inv.site, &inv.stdin, ctx),
                },
                CodeFrom::Stdin => self.feed_interpreter(program, &inv.stdin, &inv.site),
                CodeFrom::File(i) => {
                    if let Some(out) = sub_at(i) {
                        self.feed_interpreter(program, &Stdin::Pipe(out.clone()), &inv.site);
                    }
                }
                CodeFrom::Nothing => {}
            }
            return;
        }
        match program {
            "git" => {
                for code in git_config_commands(args) {
                    self.payload(&code, &inv.site, &Stdin::Opaque, ctx);
                }
            }
            "eval" => {
                let values: Option<Vec<&str>> = args.iter().map(Arg::value).collect();
                let raw: Vec<&str> = args.iter().map(|a| a.raw.as_str()).collect();
                let joined = match values {
                    Some(v) => Arg::literal(&raw.join(" "), &v.join(" ")),
                    None => {
                        let mut a = Arg::unknown(&raw.join(" "));
                        a.fetched = args.iter().any(|a| a.fetched);
                        a.setup_code = args
                            .iter()
                            .filter(|a| a.value().is_none())
                            .all(|a| a.setup_code);
                        a
                    }
                };
                if !args.is_empty() {
                    self.payload(&joined, &inv.site, &inv.stdin, ctx);
                }
            }
            "source" | "." => {
                if let Some(first) = operands(args).next() {
                    let i = args
                        .iter()
                        .position(|a| std::ptr::eq(a, first))
                        .unwrap_or(0);
                    if let Some(out) = sub_at(i) {
                        self.feed(out, &inv.site, ctx, false);
                    } else if first.is("/dev/stdin") || first.is("-") {
                        self.feed_stdin(&inv.stdin, &inv.site, ctx, true);
                    }
                }
            }
            "trap" => {
                let ops: Vec<&Arg> = operands(args).collect();
                if ops.len() >= 2 && !ops[0].is("-") {
                    self.payload(ops[0], &inv.site, &Stdin::Opaque, ctx);
                }
            }
            "alias" => {
                for a in args {
                    if let Some((_, body)) = a.value().and_then(|v| v.split_once('=')) {
                        self.script(body, &ctx.nested(Stdin::Opaque));
                    }
                }
            }
            _ => {}
        }
    }

    /// Shell code given as one argument (`bash -c CODE`, `eval`, `su -c`, `trap`).
    pub(super) fn payload(&mut self, arg: &Arg, site: &Site, stdin: &Stdin, ctx: &Ctx) {
        match arg.value() {
            Some(code) => {
                self.script(code, &ctx.nested(stdin.clone()));
            }
            None if arg.fetched => self.sink.hit(&exec::DOWNLOAD_AS_CODE, site),
            // `eval "$(ssh-agent -s)"`: set-up code a local tool prints for exactly this use.
            None if arg.setup_code => {}
            None => self.sink.hit(&exec::DYNAMIC_PAYLOAD, site),
        }
    }

    /// Shell code read from stdin.
    fn feed_stdin(&mut self, stdin: &Stdin, site: &Site, ctx: &Ctx, join: bool) {
        match stdin {
            Stdin::Pipe(upstream) => self.feed(upstream, site, ctx, join),
            Stdin::Text(Some(body)) => {
                self.script(body, &ctx.nested(Stdin::Opaque));
            }
            Stdin::Text(None) => self.sink.hit(&exec::DYNAMIC_PAYLOAD, site),
            Stdin::Opaque => {}
        }
    }

    /// Shell code printed by other commands (a pipeline or a process substitution).
    fn feed(&mut self, upstream: &[Upstream], site: &Site, ctx: &Ctx, join: bool) {
        match exec::feed(upstream) {
            exec::Feed::Parse(text) => {
                self.script(&text, &ctx.nested(Stdin::Opaque));
            }
            exec::Feed::Hit(rule) => {
                let whole = if join {
                    let mut sites: Vec<&Site> = upstream.iter().map(|u| &u.site).collect();
                    sites.push(site);
                    Site::joined(&sites, "|")
                } else {
                    site.clone()
                };
                self.sink.hit(rule, &whole);
            }
            exec::Feed::Nothing => {}
        }
    }

    /// Interpreter code read from stdin: downloads and decoded text are flagged, literal text
    /// is skimmed for process-spawning calls.
    fn feed_interpreter(&mut self, program: &str, stdin: &Stdin, site: &Site) {
        let text = match stdin {
            Stdin::Pipe(upstream) => match exec::feed(upstream) {
                exec::Feed::Parse(text) => text,
                exec::Feed::Hit(rule) => {
                    let mut sites: Vec<&Site> = upstream.iter().map(|u| &u.site).collect();
                    sites.push(site);
                    self.sink.hit(rule, &Site::joined(&sites, "|"));
                    return;
                }
                exec::Feed::Nothing => return,
            },
            Stdin::Text(Some(body)) => body.clone(),
            Stdin::Text(None) => {
                self.sink.hit(&exec::DYNAMIC_PAYLOAD, site);
                return;
            }
            Stdin::Opaque => return,
        };
        if interp::code_spawns(program, &text) {
            self.sink.hit(&rules::exec::INLINE_SPAWN, site);
        }
    }
}

/// git settings whose value is a shell command git runs.
const GIT_COMMAND_KEYS: &[&str] = &[
    "core.pager",
    "core.sshcommand",
    "core.editor",
    "core.fsmonitor",
    "core.askpass",
    "diff.external",
    "sequence.editor",
    "credential.helper",
    "gpg.program",
    "uploadpack.packobjectshook",
];

/// Shell commands set with `git -c key=value` before the subcommand (`-c alias.x='!cmd'`,
/// `-c core.pager='cmd'`).
fn git_config_commands(args: &[Arg]) -> Vec<Arg> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let Some(v) = args[i].value() else { break };
        if !v.starts_with('-') {
            break;
        }
        if v == "-c" {
            let setting = args.get(i + 1);
            match setting.and_then(Arg::value).and_then(|s| s.split_once('=')) {
                Some((key, value)) => {
                    let key = key.to_ascii_lowercase();
                    if key.starts_with("alias.") {
                        if let Some(cmd) = value.strip_prefix('!') {
                            out.push(Arg::literal(cmd, cmd));
                        }
                    } else if GIT_COMMAND_KEYS.contains(&key.as_str()) || key.starts_with("pager.")
                    {
                        out.push(Arg::literal(value, value));
                    }
                }
                None if setting.is_some_and(|a| a.value().is_none()) => {
                    out.push(Arg::unknown("-c"))
                }
                None => {}
            }
            i += 2;
        } else {
            i += if matches!(
                v,
                "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--exec-path"
            ) {
                2
            } else {
                1
            };
        }
    }
    out
}
