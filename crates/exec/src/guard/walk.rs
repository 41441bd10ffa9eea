//! Walks the parsed program down to the simple commands that will run, and hands each one to
//! the rules.
//!
//! Code inside code is walked too, because the shell runs it: command and process
//! substitutions, `bash -c` payloads, `eval`, here-documents and literal text piped into a shell,
//! `find -exec`, `xargs`, `trap`, `alias`, and the payloads of `su -c`, `env -S` and `watch`.
//! Each level of payload is parsed again by the same grammar, up to [`MAX_PAYLOAD_DEPTH`].

use brush_parser::ast::{
    self, AndOr, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList,
    ExtendedTestExpr, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, Pipeline,
    ProcessSubstitutionKind, SeparatorOperator, SimpleCommand,
};

use super::command::{Cwd, Invocation, Output, Site, Stdin, Upstream, WriteTarget};
use super::rules::{self, Sink, exec};
use super::word::{self, Arg};
use super::{Verdict, parse};

mod follow;

/// How many payloads deep (`bash -c "sh -c '...'"`, substitutions inside substitutions) the
/// guard follows before it gives up and asks for approval.
const MAX_PAYLOAD_DEPTH: usize = 8;

/// The name the guard gives a run-time item (`{}` of `find -exec`, `xargs -I`) inside a payload.
const RUNTIME_ITEM: &str = "${NESTBOX_RUNTIME_ITEM}";

/// Classifies one command line.
pub(crate) fn classify(command: &str) -> Verdict {
    let mut walker = Walker::default();
    walker.script(command, &Ctx::default());
    Verdict {
        findings: walker.sink.findings,
        parse_error: walker.parse_error,
    }
}

#[derive(Default)]
struct Walker {
    sink: Sink,
    parse_error: Option<String>,
    /// The working directory as `cd` leaves it; saved and restored around anything that runs
    /// in a child process (subshells, pipeline parts, payloads, substitutions).
    cwd: Cwd,
}

/// What the walker knows about the place it is walking.
#[derive(Clone, Default)]
struct Ctx {
    /// Payload nesting.
    depth: usize,
    /// Where stdin comes from.
    stdin: Stdin,
    /// The function whose body this is (for fork bombs).
    function: Option<String>,
    /// Inside a pipeline of two or more commands.
    in_pipeline: bool,
    /// Run in the background (`&`).
    background: bool,
    /// Under `sudo` or similar.
    elevated: bool,
    /// A string a wrapper replaces with run-time input (`{}`), inside payload text.
    placeholder: Option<String>,
}

impl Ctx {
    /// The context of code nested inside this one (a payload or a substitution).
    fn nested(&self, stdin: Stdin) -> Ctx {
        Ctx {
            depth: self.depth + 1,
            stdin,
            function: self.function.clone(),
            in_pipeline: false,
            background: false,
            elevated: self.elevated,
            placeholder: self.placeholder.clone(),
        }
    }
}

/// What a simple command's redirections amount to.
#[derive(Default)]
struct Redirections {
    writes: Vec<WriteTarget>,
    stdin: Option<Stdin>,
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Walker {
    /// Parses and walks shell text. Returns what it prints (for pipelines and substitutions).
    fn script(&mut self, src: &str, ctx: &Ctx) -> Vec<Upstream> {
        if ctx.depth > MAX_PAYLOAD_DEPTH {
            self.unanalysed(
                src,
                format!("code is nested more than {MAX_PAYLOAD_DEPTH} payloads deep"),
            );
            return Vec::new();
        }
        let src = match &ctx.placeholder {
            Some(p) if !p.is_empty() => src.replace(p.as_str(), RUNTIME_ITEM),
            _ => src.to_owned(),
        };
        match parse::program(&src) {
            Ok(program) => {
                let saved = self.cwd.clone();
                let mut out = Vec::new();
                for list in &program.complete_commands {
                    out = self.compound_list(list, ctx);
                }
                self.cwd = saved;
                out
            }
            Err(refusal) => {
                self.unanalysed(&src, refusal.to_string());
                Vec::new()
            }
        }
    }

    fn unanalysed(&mut self, src: &str, why: String) {
        if self.parse_error.is_none() {
            self.parse_error = Some(why.clone());
        }
        let site = Site {
            text: src.to_owned(),
            key: vec![src.to_owned()],
        };
        self.sink.hit_with(
            &exec::UNANALYSED,
            format!("{}: {why}", exec::UNANALYSED.reason),
            &site,
        );
    }

    fn compound_list(&mut self, list: &CompoundList, ctx: &Ctx) -> Vec<Upstream> {
        let mut out = Vec::new();
        for item in &list.0 {
            let mut c = ctx.clone();
            c.background = matches!(item.1, SeparatorOperator::Async);
            out.extend(self.and_or(&item.0, &c));
        }
        out
    }

    fn and_or(&mut self, list: &ast::AndOrList, ctx: &Ctx) -> Vec<Upstream> {
        let mut out = self.pipeline(&list.first, ctx);
        for next in &list.additional {
            let (AndOr::And(p) | AndOr::Or(p)) = next;
            out = self.pipeline(p, ctx);
        }
        out
    }

    fn pipeline(&mut self, p: &Pipeline, ctx: &Ctx) -> Vec<Upstream> {
        let many = p.seq.len() > 1;
        let mut upstream = match &ctx.stdin {
            Stdin::Pipe(u) => u.clone(),
            _ => Vec::new(),
        };
        let mut out = Vec::new();
        for (i, cmd) in p.seq.iter().enumerate() {
            let mut c = ctx.clone();
            if many {
                c.in_pipeline = true;
                if i > 0 {
                    c.stdin = Stdin::Pipe(upstream.clone());
                }
            }
            let saved = self.cwd.clone();
            out = self.command(cmd, &c);
            if many {
                self.cwd = saved;
                upstream.extend(out.iter().cloned());
            }
        }
        out
    }

    fn command(&mut self, cmd: &Command, ctx: &Ctx) -> Vec<Upstream> {
        match cmd {
            Command::Simple(sc) => self.simple(sc, ctx),
            Command::Compound(cc, redirects) => {
                let mut c = ctx.clone();
                if let Some(list) = redirects {
                    let mut text = Vec::new();
                    let mut key = Vec::new();
                    let mut r = Redirections::default();
                    for redirect in &list.0 {
                        self.redirect(redirect, ctx, &mut r, &mut text, &mut key);
                    }
                    if let Some(stdin) = r.stdin.take() {
                        c.stdin = stdin;
                    }
                    if !r.writes.is_empty() {
                        let text = collapse(&cmd.to_string());
                        let site = Site {
                            key: vec![text.clone()],
                            text,
                        };
                        let inv = Invocation {
                            argv: Vec::new(),
                            site,
                            stdin: Stdin::Opaque,
                            writes: r.writes,
                            elevated: ctx.elevated,
                            appends_input: false,
                            cwd: self.cwd.clone(),
                        };
                        rules::check(&inv, &mut self.sink);
                    }
                }
                self.compound(cc, &c)
            }
            Command::Function(f) => {
                let mut c = ctx.clone();
                c.function = Some(f.fname.value.to_ascii_lowercase());
                c.in_pipeline = false;
                c.background = false;
                let saved = self.cwd.clone();
                self.compound(&f.body.0, &c);
                self.cwd = saved;
                Vec::new()
            }
            Command::ExtendedTest(test, _) => {
                self.test_expr(&test.expr, ctx);
                Vec::new()
            }
        }
    }

    fn test_expr(&mut self, expr: &ExtendedTestExpr, ctx: &Ctx) {
        match expr {
            ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
                self.test_expr(a, ctx);
                self.test_expr(b, ctx);
            }
            ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => self.test_expr(a, ctx),
            ExtendedTestExpr::UnaryTest(_, w) => {
                self.word(&w.value, ctx);
            }
            ExtendedTestExpr::BinaryTest(_, a, b) => {
                self.word(&a.value, ctx);
                self.word(&b.value, ctx);
            }
        }
    }

    fn compound(&mut self, cc: &CompoundCommand, ctx: &Ctx) -> Vec<Upstream> {
        match cc {
            CompoundCommand::Arithmetic(a) => {
                self.arithmetic(&a.expr.value);
                self.maybe_commands(&a.expr.value, ctx);
                Vec::new()
            }
            CompoundCommand::ArithmeticForClause(a) => {
                for e in [&a.initializer, &a.condition, &a.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value);
                }
                self.compound_list(&a.body.list, ctx)
            }
            CompoundCommand::BraceGroup(b) => self.compound_list(&b.list, ctx),
            CompoundCommand::Subshell(s) => {
                let saved = self.cwd.clone();
                let out = self.compound_list(&s.list, ctx);
                self.cwd = saved;
                out
            }
            CompoundCommand::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value, ctx);
                }
                self.compound_list(&f.body.list, ctx)
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, ctx);
                let mut out = Vec::new();
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, ctx);
                    }
                    if let Some(list) = &item.cmd {
                        out.extend(self.compound_list(list, ctx));
                    }
                }
                out
            }
            CompoundCommand::IfClause(i) => {
                let mut out = self.compound_list(&i.condition, ctx);
                out.extend(self.compound_list(&i.then, ctx));
                for e in i.elses.iter().flatten() {
                    if let Some(cond) = &e.condition {
                        out.extend(self.compound_list(cond, ctx));
                    }
                    out.extend(self.compound_list(&e.body, ctx));
                }
                out
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                let mut out = self.compound_list(&w.0, ctx);
                out.extend(self.compound_list(&w.1.list, ctx));
                out
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body, ctx),
        }
    }

    fn arithmetic(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            let site = Site {
                text: text.to_owned(),
                key: vec![text.to_owned()],
            };
            self.sink.hit(&exec::HIDDEN_CODE, &site);
        }
    }

    /// Reads text that the parser took for arithmetic as commands too, keeping what it finds
    /// and ignoring text that is not shell. The parser reads `( (rm -rf /) )`, two nested
    /// subshells to bash, as the arithmetic command `((rm -rf /))`; real arithmetic such as
    /// `i++` or `x = y + 1` reads as harmless commands.
    fn maybe_commands(&mut self, text: &str, ctx: &Ctx) {
        // Not a payload level: the text is part of the command already parsed and shrinks by
        // its `((`/`))` each time, so this recursion ends within the nesting limit.
        let mut nested = ctx.clone();
        nested.stdin = Stdin::Opaque;
        nested.in_pipeline = false;
        nested.background = false;
        if let Ok(program) = parse::program(text) {
            let saved = self.cwd.clone();
            for list in &program.complete_commands {
                self.compound_list(list, &nested);
            }
            self.cwd = saved;
        }
    }

    /// Expands one word, walking the substitutions inside it.
    fn word(&mut self, raw: &str, ctx: &Ctx) -> Vec<Arg> {
        let expansion = word::expand(raw);
        if expansion.malformed {
            self.unanalysed(raw, "a word could not be parsed".to_owned());
        }
        if expansion.hidden_code {
            let site = Site {
                text: raw.to_owned(),
                key: vec![raw.to_owned()],
            };
            self.sink.hit(&exec::HIDDEN_CODE, &site);
        }
        for text in &expansion.arithmetic {
            self.maybe_commands(text, ctx);
        }
        let mut fetched = false;
        let mut setup = !expansion.substitutions.is_empty() && !expansion.params;
        for s in &expansion.substitutions {
            let out = self.script(&s.body, &ctx.nested(Stdin::Opaque));
            fetched |= out
                .iter()
                .any(|u| matches!(u.output, Output::Download | Output::Decoded));
            setup &= !out.is_empty() && out.iter().all(|u| u.output == Output::ShellSetup);
        }
        let mut args = expansion.args;
        for a in &mut args {
            a.fetched = fetched;
            a.setup_code = setup;
        }
        args
    }

    fn simple(&mut self, sc: &SimpleCommand, ctx: &Ctx) -> Vec<Upstream> {
        let mut argv: Vec<Arg> = Vec::new();
        let mut text: Vec<String> = Vec::new();
        let mut key: Vec<String> = Vec::new();
        let mut r = Redirections::default();
        // Process substitutions among the arguments, by argv index, with what they print.
        let mut process_subs: Vec<(usize, Vec<Upstream>)> = Vec::new();

        let prefix = sc.prefix.iter().flat_map(|p| p.0.iter());
        let suffix = sc.suffix.iter().flat_map(|s| s.0.iter());
        let name = sc
            .word_or_name
            .iter()
            .map(|w| CommandPrefixOrSuffixItem::Word(w.clone()));
        let mut in_prefix = true;
        let prefix_len = sc.prefix.as_ref().map_or(0, |p| p.0.len());
        for (n, item) in prefix
            .cloned()
            .chain(name)
            .chain(suffix.cloned())
            .enumerate()
        {
            if n >= prefix_len {
                in_prefix = false;
            }
            match &item {
                CommandPrefixOrSuffixItem::Word(w) => {
                    let args = self.word(&w.value, ctx);
                    text.push(w.value.clone());
                    key.extend(args.iter().map(|a| a.normalized().to_owned()));
                    argv.extend(args);
                }
                CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    let args = self.word(&w.value, ctx);
                    text.push(w.value.clone());
                    key.extend(args.iter().map(|a| a.normalized().to_owned()));
                    if !in_prefix {
                        // `export X=...`, `declare X=...`: an argument of the builtin.
                        argv.extend(args);
                    }
                }
                CommandPrefixOrSuffixItem::IoRedirect(redirect) => {
                    self.redirect(redirect, ctx, &mut r, &mut text, &mut key);
                }
                CommandPrefixOrSuffixItem::ProcessSubstitution(kind, sub) => {
                    let saved = self.cwd.clone();
                    let out = self.compound_list(&sub.list, &ctx.nested(Stdin::Opaque));
                    self.cwd = saved;
                    let shown = match kind {
                        ProcessSubstitutionKind::Read => {
                            format!("<({})", collapse(&sub.list.to_string()))
                        }
                        ProcessSubstitutionKind::Write => {
                            format!(">({})", collapse(&sub.list.to_string()))
                        }
                    };
                    if matches!(kind, ProcessSubstitutionKind::Read) {
                        process_subs.push((argv.len(), out));
                    }
                    argv.push(Arg::unknown(&shown));
                    key.push(shown.clone());
                    text.push(shown);
                }
            }
        }
        let site = Site {
            text: text.join(" "),
            key,
        };
        let stdin = r.stdin.unwrap_or_else(|| ctx.stdin.clone());
        self.run(argv, site, stdin, r.writes, &process_subs, ctx)
    }

    fn redirect(
        &mut self,
        redirect: &IoRedirect,
        ctx: &Ctx,
        r: &mut Redirections,
        text: &mut Vec<String>,
        key: &mut Vec<String>,
    ) {
        let reads_stdin = |fd: &Option<i32>| fd.is_none_or(|fd| fd == 0);
        match redirect {
            IoRedirect::HereDocument(fd, doc) => {
                if doc.requires_expansion {
                    let e = word::expand_heredoc(&doc.doc.value);
                    for s in &e.substitutions {
                        self.script(&s.body, &ctx.nested(Stdin::Opaque));
                    }
                }
                if reads_stdin(fd) {
                    r.stdin = Some(Stdin::Text(Some(doc.doc.value.clone())));
                }
                let shown = format!("<<{}", doc.here_end.value);
                // The body is part of what an approval approves, though too long to show.
                key.push(shown.clone());
                key.push(doc.doc.value.clone());
                text.push(shown);
            }
            IoRedirect::HereString(fd, w) => {
                let args = self.word(&w.value, ctx);
                if reads_stdin(fd) {
                    let value = args
                        .first()
                        .and_then(|a| a.value().map(|v| format!("{v}\n")));
                    r.stdin = Some(Stdin::Text(value));
                }
                text.push(format!("<<< {}", w.value));
                key.push("<<<".to_owned());
                key.extend(args.iter().map(|a| a.normalized().to_owned()));
            }
            IoRedirect::OutputAndError(w, append) => {
                let args = self.word(&w.value, ctx);
                let op = if *append { "&>>" } else { "&>" };
                text.push(format!("{op}{}", w.value));
                key.extend(args.iter().map(|a| format!("{op}{}", a.normalized())));
                r.writes
                    .extend(args.into_iter().map(|target| WriteTarget { target }));
            }
            IoRedirect::File(fd, kind, target) => {
                let fd_text = fd.map(|n| n.to_string()).unwrap_or_default();
                let op = format!("{fd_text}{kind}");
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let args = self.word(&w.value, ctx);
                        text.push(format!("{op}{}", w.value));
                        key.extend(args.iter().map(|a| format!("{op}{}", a.normalized())));
                        match kind {
                            IoFileRedirectKind::Write
                            | IoFileRedirectKind::Append
                            | IoFileRedirectKind::Clobber
                            | IoFileRedirectKind::ReadAndWrite => {
                                r.writes
                                    .extend(args.into_iter().map(|target| WriteTarget { target }));
                            }
                            IoFileRedirectKind::Read if reads_stdin(fd) => {
                                r.stdin = Some(Stdin::Opaque)
                            }
                            _ => {}
                        }
                    }
                    IoFileRedirectTarget::Duplicate(w) => {
                        let args = self.word(&w.value, ctx);
                        text.push(format!("{op}{}", w.value));
                        key.extend(args.iter().map(|a| format!("{op}{}", a.normalized())));
                        // `>& file` (not a number, not `-`) writes to a file in bash.
                        if matches!(kind, IoFileRedirectKind::DuplicateOutput) {
                            for a in args {
                                let is_fd = a.value().is_some_and(|v| {
                                    v == "-"
                                        || v.trim_end_matches('-')
                                            .chars()
                                            .all(|c| c.is_ascii_digit())
                                });
                                if !is_fd {
                                    r.writes.push(WriteTarget { target: a });
                                }
                            }
                        }
                    }
                    IoFileRedirectTarget::Fd(n) => {
                        let shown = format!("{op}{n}");
                        key.push(shown.clone());
                        text.push(shown);
                    }
                    IoFileRedirectTarget::ProcessSubstitution(pkind, sub) => {
                        let saved = self.cwd.clone();
                        let out = self.compound_list(&sub.list, &ctx.nested(Stdin::Opaque));
                        self.cwd = saved;
                        let shown = match pkind {
                            ProcessSubstitutionKind::Read => {
                                format!("{op}<({})", collapse(&sub.list.to_string()))
                            }
                            ProcessSubstitutionKind::Write => {
                                format!("{op}>({})", collapse(&sub.list.to_string()))
                            }
                        };
                        if matches!(kind, IoFileRedirectKind::Read) && reads_stdin(fd) {
                            r.stdin = Some(Stdin::Pipe(out));
                        }
                        key.push(shown.clone());
                        text.push(shown);
                    }
                }
            }
        }
    }
}
