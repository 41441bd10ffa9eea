//! The policy as nestbox uses it after loading: plain data, every entry remembering where it
//! came from so that a later refusal ("/opt/tool does not exist") can point at the line.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Where a policy entry came from. Carried into every error about that entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default policy.
    Default,
    /// A command-line flag such as `--read`.
    Flag(&'static str),
    /// A position in a policy file (1-based line and column).
    File {
        file: String,
        line: usize,
        column: usize,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("built-in default policy"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
            Origin::File { file, line, column } => write!(f, "{file}:{line}:{column}"),
        }
    }
}

/// Which base the policy starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Base {
    /// Start from the built-in default policy and add to it (the usual case).
    #[default]
    Default,
    /// Start from nothing: only what the file and flags name (plus the step's private temp dir).
    None,
}

/// What a path entry grants. Each level includes reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// Read files and list directories.
    Read,
    /// Read, create, modify and remove.
    Write,
    /// Read and execute (programs, shared libraries, the dynamic loader).
    Exec,
}

impl Access {
    /// The policy key that grants this access (`read`, `write`, `exec`).
    pub fn key(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Exec => "exec",
        }
    }
}

/// One filesystem entry of the policy, as written (resolution happens in the cage).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRule {
    /// The path as written: absolute, `~/...` (the caller's home), or relative to the working
    /// directory. The last component may hold `*` wildcards.
    pub path: String,
    /// Written with a leading `?`: a missing path is skipped instead of refused.
    pub optional: bool,
    pub access: Access,
    pub origin: Origin,
}

impl PathRule {
    /// Parses one entry; a leading `?` marks it optional.
    pub fn parse(text: &str, access: Access, origin: Origin) -> Result<PathRule, String> {
        let (optional, path) = match text.strip_prefix('?') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if path.is_empty() {
            return Err("empty path".into());
        }
        if path.contains('\0') {
            return Err("path contains a NUL byte".into());
        }
        if path.starts_with('~') && path != "~" && !path.starts_with("~/") {
            return Err(format!(
                "`{path}`: only `~` and `~/...` (the caller's home) are understood, not `~user`"
            ));
        }
        if let Some((dir, _)) = path.rsplit_once('/')
            && dir.contains('*')
        {
            return Err(format!(
                "`{path}`: a wildcard may appear only in the last path component"
            ));
        }
        Ok(PathRule {
            path: path.to_string(),
            optional,
            access,
            origin,
        })
    }
}

/// How the step is kept to its network exit (the relay). See DESIGN section 2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetMode {
    /// netns when user namespaces can be created, port mode otherwise.
    #[default]
    Auto,
    /// The step gets its own network namespace holding only `lo` and the relay's listener.
    Netns,
    /// Landlock TCP rules allow only the relay's port.
    Port,
}

impl NetMode {
    pub fn parse(text: &str) -> Result<NetMode, String> {
        match text {
            "auto" => Ok(NetMode::Auto),
            "netns" => Ok(NetMode::Netns),
            "port" => Ok(NetMode::Port),
            other => Err(format!(
                "unknown network mode `{other}`: expected `auto`, `netns` or `port`"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NetMode::Auto => "auto",
            NetMode::Netns => "netns",
            NetMode::Port => "port",
        }
    }
}

/// One network entry (`allow`, `deny`, `presets`) as written, with its origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetEntry {
    pub text: String,
    pub origin: Origin,
}

impl NetEntry {
    /// The entries given with one repeatable command-line flag, each remembering it.
    pub fn from_flag(texts: &[String], flag: &'static str) -> Vec<NetEntry> {
        texts
            .iter()
            .map(|text| NetEntry {
                text: text.clone(),
                origin: Origin::Flag(flag),
            })
            .collect()
    }
}

/// The `[net]` section: which hosts the step's relay lets through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetPolicy {
    /// Hosts (`host`, `*.suffix`, with optional `:port`), IP addresses and CIDR ranges.
    pub allow: Vec<NetEntry>,
    /// Entries that win over `allow`.
    pub deny: Vec<NetEntry>,
    /// Named host sets (`pypi`, `github`, ...).
    pub presets: Vec<NetEntry>,
    /// Ports the step must never reach, even in port mode (outer proxy, gateway, agent API).
    pub deny_ports: Vec<u16>,
    /// Proxy the relay chains through instead of dialing.
    pub upstream: Option<NetEntry>,
    pub mode: NetMode,
}

impl NetPolicy {
    /// Whether the step needs a network exit at all.
    pub fn wants_network(&self) -> bool {
        !self.allow.is_empty() || !self.presets.is_empty()
    }
}

/// The `[env]` section: what of the caller's environment enters the step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Names copied from the caller's environment when set there.
    pub pass: Vec<String>,
    /// Names set to fixed values.
    pub set: BTreeMap<String, String>,
}

/// The `[limits]` section. `None` means "not limited by the policy".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time after which the whole step is killed.
    pub timeout: Option<Duration>,
    /// RLIMIT_NPROC: processes of the step's user (the kernel counts per user, not per step).
    pub processes: Option<u64>,
    /// RLIMIT_NOFILE.
    pub open_files: Option<u64>,
    /// RLIMIT_AS in bytes (address space; runtimes that reserve large regions need room).
    pub memory: Option<u64>,
    /// RLIMIT_FSIZE in bytes.
    pub file_size: Option<u64>,
    /// RLIMIT_CPU (CPU seconds).
    pub cpu: Option<Duration>,
}

impl Limits {
    /// Fills each unset limit from `other`.
    fn fill_from(&mut self, other: &Limits) {
        fn fill<T: Clone>(mine: &mut Option<T>, theirs: &Option<T>) {
            if theirs.is_some() {
                *mine = theirs.clone();
            }
        }
        fill(&mut self.timeout, &other.timeout);
        fill(&mut self.processes, &other.processes);
        fill(&mut self.open_files, &other.open_files);
        fill(&mut self.memory, &other.memory);
        fill(&mut self.file_size, &other.file_size);
        fill(&mut self.cpu, &other.cpu);
    }
}

/// A worker-side policy: what one step may touch. See DESIGN section 5.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub base: Base,
    /// Filesystem grants in the order they were written.
    pub fs: Vec<PathRule>,
    pub net: NetPolicy,
    pub env: EnvPolicy,
    pub limits: Limits,
}

impl Policy {
    /// Adds `other` on top of `self`: lists are appended, scalar settings in `other` win.
    pub fn extend(&mut self, other: Policy) {
        self.fs.extend(other.fs);
        self.net.allow.extend(other.net.allow);
        self.net.deny.extend(other.net.deny);
        self.net.presets.extend(other.net.presets);
        self.net.deny_ports.extend(other.net.deny_ports);
        if other.net.upstream.is_some() {
            self.net.upstream = other.net.upstream;
        }
        if other.net.mode != NetMode::Auto {
            self.net.mode = other.net.mode;
        }
        self.env.pass.extend(other.env.pass);
        self.env.set.extend(other.env.set);
        self.limits.fill_from(&other.limits);
    }

    /// The policy a step really gets: the built-in default (unless the file says
    /// `base = "none"`), then the file, then the command-line flags.
    pub fn effective(file: Option<Policy>, flags: Policy) -> Policy {
        let file = file.unwrap_or_default();
        let mut out = match file.base {
            Base::Default => crate::defaults::default_policy(),
            Base::None => Policy {
                base: Base::None,
                ..Policy::default()
            },
        };
        out.extend(file);
        out.extend(flags);
        out
    }

    /// Filesystem entries granting exactly `access`.
    pub fn paths(&self, access: Access) -> impl Iterator<Item = &PathRule> {
        self.fs.iter().filter(move |r| r.access == access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rules(paths: &[String], access: Access, origin: Origin) -> Vec<PathRule> {
        paths
            .iter()
            .map(|p| PathRule::parse(p, access, origin.clone()).unwrap())
            .collect()
    }

    proptest! {
        /// The effective policy holds every entry of the default, the file and the flags, in
        /// that order, and scalar settings from the flags win over the file's.
        #[test]
        fn effective_policy_keeps_every_entry_in_order(
            file_paths in proptest::collection::vec("/[a-z]{1,8}", 0..5),
            flag_paths in proptest::collection::vec("/[a-z]{1,8}", 0..5),
            file_timeout in proptest::option::of(1u64..1000),
            flag_timeout in proptest::option::of(1u64..1000),
            none_base in any::<bool>(),
        ) {
            let file = Policy {
                base: if none_base { Base::None } else { Base::Default },
                fs: rules(&file_paths, Access::Read, Origin::File { file: "p.toml".into(), line: 1, column: 1 }),
                limits: Limits { timeout: file_timeout.map(Duration::from_secs), ..Limits::default() },
                ..Policy::default()
            };
            let flags = Policy {
                fs: rules(&flag_paths, Access::Write, Origin::Flag("--write")),
                limits: Limits { timeout: flag_timeout.map(Duration::from_secs), ..Limits::default() },
                ..Policy::default()
            };
            let eff = Policy::effective(Some(file), flags);
            let defaults = if none_base { 0 } else { crate::default_policy().fs.len() };
            prop_assert_eq!(eff.fs.len(), defaults + file_paths.len() + flag_paths.len());
            let tail: Vec<&str> = eff.fs[defaults..].iter().map(|r| r.path.as_str()).collect();
            let expected: Vec<&str> = file_paths.iter().chain(&flag_paths).map(String::as_str).collect();
            prop_assert_eq!(tail, expected);
            prop_assert_eq!(eff.limits.timeout, flag_timeout.or(file_timeout).map(Duration::from_secs));
            prop_assert_eq!(eff.base, if none_base { Base::None } else { Base::Default });
        }
    }
}
