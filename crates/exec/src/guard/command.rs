//! What the walker hands to the rules: one simple command that will run, with its wrappers
//! peeled off, where its input comes from, and where its output goes.

use super::word::Arg;

/// The simple command as written, for the finding's `matched` text and its approval key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Site {
    /// The words and redirections as written, joined by single spaces.
    pub text: String,
    /// The same, normalized (quotes removed where the value is known).
    pub key: Vec<String>,
}

impl Site {
    /// Joins several sites (the commands of a pipeline) into one.
    pub fn joined(sites: &[&Site], sep: &str) -> Site {
        let text = sites
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(&format!(" {sep} "));
        let mut key = Vec::new();
        for (i, s) in sites.iter().enumerate() {
            if i > 0 {
                key.push(sep.to_owned());
            }
            key.extend(s.key.iter().cloned());
        }
        Site { text, key }
    }
}

/// What an earlier command in a pipeline writes to its stdout, as far as the rules care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Something fetched from the network (`curl`, `wget`, ...).
    Download,
    /// A decoder's output (`base64 -d`, `xxd -r`, ...): text nobody reviewed.
    Decoded,
    /// Literal text known now (`echo 'rm -rf /'`, `printf '%s' ...` without escapes).
    Text(String),
    /// Text that depends on run-time values (`echo "$X"`).
    UnknownText,
    /// Shell set-up code printed by a local tool for `eval` (`ssh-agent -s`, `direnv hook`).
    ShellSetup,
    /// Anything else (`cat file`, `git diff`): the same as running a file.
    Other,
}

/// An earlier command of the same pipeline.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    pub output: Output,
    pub site: Site,
}

/// Where a command's stdin comes from.
#[derive(Clone, Debug, Default)]
pub(crate) enum Stdin {
    /// The caller's stdin, a file, or nothing the guard can see.
    #[default]
    Opaque,
    /// The commands before it in a pipeline, nearest last.
    Pipe(Vec<Upstream>),
    /// A here-document or here-string whose text is known (`None` when it expands values).
    Text(Option<String>),
}

/// The working directory a command runs in, relative to where the command line started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Cwd {
    /// Where the command line started (unknown, but relative paths stay relative to it).
    #[default]
    Start,
    /// A directory set by a literal `cd`: absolute, `~`-based, or relative to the start.
    Known(String),
    /// Set by a `cd` whose target is only known at run time.
    Unknown,
}

impl Cwd {
    /// The directory after `cd target` (`None`: a target known only at run time).
    pub fn after_cd(&self, target: Option<&str>) -> Cwd {
        match target {
            None | Some("-") => Cwd::Unknown,
            Some(t) if t.starts_with('/') || t.starts_with('~') => Cwd::Known(t.to_owned()),
            Some(t) => match self {
                Cwd::Start => Cwd::Known(t.to_owned()),
                Cwd::Known(base) => Cwd::Known(format!("{base}/{t}")),
                Cwd::Unknown => Cwd::Unknown,
            },
        }
    }
}

/// A redirection that writes to a file.
#[derive(Clone, Debug)]
pub(crate) struct WriteTarget {
    pub target: Arg,
}

/// One simple command that will run, after its wrappers (`sudo`, `env`, `timeout`, ...) are
/// peeled off.
#[derive(Clone, Debug)]
pub(crate) struct Invocation {
    /// The effective argv: the program first.
    pub argv: Vec<Arg>,
    /// The simple command as written (wrappers included).
    pub site: Site,
    /// Where stdin comes from.
    pub stdin: Stdin,
    /// Files its redirections write to.
    pub writes: Vec<WriteTarget>,
    /// Run through `sudo`, `doas` or a similar privilege wrapper.
    pub elevated: bool,
    /// `xargs` appends arguments read from stdin at run time.
    pub appends_input: bool,
    /// The working directory it runs in, as far as earlier `cd`s tell.
    pub cwd: Cwd,
}

impl Invocation {
    /// The program's name: the basename of `argv[0]`, lower-cased (so `/usr/bin/rm`, `\rm`
    /// and, on case-insensitive file systems, `RM` are all `rm`). `None` when the name is only
    /// known at run time.
    pub fn program(&self) -> Option<String> {
        let first = self.argv.first()?.value()?;
        Some(basename(first).to_ascii_lowercase())
    }

    /// A path argument resolved against the working directory (`cd / && rm -rf *` deletes
    /// `/*`). `None` when the path or the directory is only known at run time.
    pub fn path(&self, arg: &Arg) -> Option<String> {
        let v = arg.value()?;
        if v.starts_with('/') || v.starts_with('~') {
            return Some(v.to_owned());
        }
        match &self.cwd {
            Cwd::Start => Some(v.to_owned()),
            Cwd::Known(base) => Some(format!("{base}/{v}")),
            Cwd::Unknown => None,
        }
    }

    /// The arguments after the program.
    pub fn args(&self) -> &[Arg] {
        self.argv.get(1..).unwrap_or(&[])
    }
}

/// The last path component of a program name.
pub(crate) fn basename(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((_, name)) => name,
        None => trimmed,
    }
}

/// Splits arguments into options and operands the way most GNU tools do: an argument starting
/// with `-` (but not `-` alone) is an option until `--`.
pub(crate) fn operands(args: &[Arg]) -> impl Iterator<Item = &Arg> {
    let mut after_dashdash = false;
    args.iter().filter(move |a| {
        if after_dashdash {
            return true;
        }
        match a.value() {
            Some("--") => {
                after_dashdash = true;
                false
            }
            Some(v) => !(v.starts_with('-') && v.len() > 1),
            None => true,
        }
    })
}

/// True when `args` carry the short flag `short` (alone or bundled, as in `-rf`) or one of the
/// long flags, before any `--`.
pub(crate) fn has_flag(args: &[Arg], short: char, long: &[&str]) -> bool {
    for a in args {
        let Some(v) = a.value() else { continue };
        if v == "--" {
            break;
        }
        if let Some(name) = v.strip_prefix("--") {
            let name = name.split('=').next().unwrap_or(name);
            if long.iter().any(|l| l.trim_start_matches("--") == name) {
                return true;
            }
        } else if let Some(cluster) = v.strip_prefix('-')
            && cluster.chars().all(|c| c.is_ascii_alphanumeric())
            && cluster.contains(short)
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::literal(w, w)).collect()
    }

    #[test]
    fn basename_strips_directories() {
        assert_eq!(basename("/usr/bin/rm"), "rm");
        assert_eq!(basename("rm"), "rm");
        assert_eq!(basename("./bin/tool/"), "tool");
    }

    #[test]
    fn bundled_and_long_flags_are_found_before_dashdash_only() {
        let a = args(&["-rf", "x"]);
        assert!(has_flag(&a, 'r', &["--recursive"]));
        let a = args(&["--recursive", "x"]);
        assert!(has_flag(&a, 'r', &["--recursive"]));
        let a = args(&["--", "-rf"]);
        assert!(!has_flag(&a, 'r', &["--recursive"]));
    }

    #[test]
    fn operands_skip_options_until_dashdash() {
        let a = args(&["-f", "a", "--", "-b"]);
        let ops: Vec<_> = operands(&a).filter_map(|a| a.value()).collect();
        assert_eq!(ops, vec!["a", "-b"]);
    }
}
