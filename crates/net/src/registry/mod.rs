//! Expanding presets on this machine. Service presets are fixed lists; registry presets read
//! the hosts from each ecosystem's own configuration, asking the tool itself where it can answer,
//! so a corporate mirror works without editing any nestbox policy:
//!
//! | preset | asks | then reads |
//! |---|---|---|
//! | `pypi` | `pip config list` | `PIP_*`/`UV_*` variables, pip.conf files |
//! | `npm` | `npm config list --json` | `npm_config_registry`, `.npmrc` files |
//! | `crates` | (cargo has no stable query) | `.cargo/config.toml` files, `CARGO_REGISTRIES_*_INDEX` |
//! | `debian` | `apt-get indextargets` | `sources.list`, `sources.list.d/*.list`, `*.sources` |
//!
//! Every host found says how it was found (`via`), which `nestbox presets` shows and refusals
//! quote. When the configuration names nothing, the ecosystem's default is used.
//!
//! ```
//! use nestbox_net::registry::{expand, Discovery};
//! use nestbox_policy::find_preset;
//!
//! let d = Discovery::offline().with_env("PIP_INDEX_URL", "https://mirror.corp.example/simple");
//! let pypi = expand(find_preset("pypi").unwrap(), &d);
//! let hosts: Vec<String> = pypi.hosts.iter().map(|h| h.rule.to_string()).collect();
//! assert_eq!(hosts, ["files.pythonhosted.org", "mirror.corp.example"]);
//! ```

mod crates;
mod debian;
mod npm;
mod pypi;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nestbox_policy::host::{HostPattern, HostRule, PortSpec, parse_authority};
use nestbox_policy::{Host, Preset, PresetKind};

/// Where discovery looks: an environment, a home directory, a filesystem root for system
/// files, and whether it may run the package tools.
///
/// Never the working directory: it holds the repository the step is about to run, and a
/// project's `.npmrc` or `.cargo/config.toml` would let that repository add hosts to its own
/// allowlist (or, through `python -m pip`, run code outside the cage). The tools run from the
/// home directory (or `/`) for the same reason.
#[derive(Clone, Debug)]
pub struct Discovery {
    env: BTreeMap<String, String>,
    home: Option<PathBuf>,
    root: PathBuf,
    run_tools: bool,
    tool_timeout: Duration,
}

impl Discovery {
    /// This process's environment and home, the real `/`, tools allowed.
    pub fn from_process() -> Discovery {
        let env: BTreeMap<String, String> = std::env::vars().collect();
        let home = env.get("HOME").map(PathBuf::from);
        Discovery {
            env,
            home,
            root: PathBuf::from("/"),
            run_tools: true,
            tool_timeout: Duration::from_secs(5),
        }
    }

    /// Nothing to look at: every registry preset expands to its defaults. For tests and for
    /// reporting what a preset means anywhere.
    pub fn offline() -> Discovery {
        Discovery {
            env: BTreeMap::new(),
            home: None,
            root: PathBuf::from("/nonexistent-nestbox-root"),
            run_tools: false,
            tool_timeout: Duration::from_secs(5),
        }
    }

    /// Sets one environment variable.
    pub fn with_env(mut self, name: &str, value: &str) -> Discovery {
        self.env.insert(name.to_string(), value.to_string());
        self
    }

    /// Sets the home directory (`~/.npmrc`, `~/.cargo`, `~/.config/pip`).
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Discovery {
        self.home = Some(home.into());
        self
    }

    /// Sets the root under which system files (`etc/apt`, `etc/pip.conf`) are read.
    pub fn with_root(mut self, root: impl Into<PathBuf>) -> Discovery {
        self.root = root.into();
        self
    }

    /// Allows or forbids running `pip`, `npm` and `apt-get`.
    pub fn with_tools(mut self, run: bool) -> Discovery {
        self.run_tools = run;
        self
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    fn system_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    fn home_path(&self, path: &str) -> Option<PathBuf> {
        self.home.as_ref().map(|h| h.join(path))
    }

    /// Runs a package tool and returns its standard output, or `None` when it is missing, fails
    /// or takes longer than the timeout (it is then killed).
    fn run(&self, program: &str, args: &[&str]) -> Option<String> {
        if !self.run_tools {
            return None;
        }
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // Never the working directory (see the type's doc).
        cmd.current_dir(
            self.home
                .as_deref()
                .filter(|h| h.is_dir())
                .unwrap_or(Path::new("/")),
        );
        let mut child = cmd.spawn().ok()?;
        let mut stdout = child.stdout.take()?;
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            out
        });
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() < self.tool_timeout => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        };
        let out = reader.join().ok()?;
        if !status.success() {
            return None;
        }
        String::from_utf8(out).ok()
    }
}

/// One host a preset expanded to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The allow entry.
    pub rule: HostRule,
    /// How it was found: `built in`, `default`, `pip config list`, a file path, a variable.
    pub via: String,
}

/// What a preset expands to here.
#[derive(Clone, Debug)]
pub struct Expansion {
    /// The preset.
    pub preset: &'static Preset,
    /// The allow entries, without duplicates, in discovery order.
    pub hosts: Vec<Found>,
    /// Things worth knowing: sources skipped (local paths, unparsable URLs), which tool answered.
    pub notes: Vec<String>,
}

/// What one ecosystem's discovery found.
#[derive(Debug, Default)]
struct Sources {
    /// URLs (or bare hosts) with how each was found.
    urls: Vec<(String, String)>,
    notes: Vec<String>,
    /// Whether the configuration names the main index itself (so the ecosystem's default is
    /// not used). Extra indexes and local wheel directories do not count.
    replaces_default: bool,
}

impl Sources {
    fn add(&mut self, url: &str, via: impl Into<String>) {
        self.urls.push((url.trim().to_string(), via.into()));
    }
}

/// Expands `preset` using what `discovery` can see.
pub fn expand(preset: &'static Preset, discovery: &Discovery) -> Expansion {
    let mut out = Expansion {
        preset,
        hosts: Vec::new(),
        notes: Vec::new(),
    };
    let via_fixed = match preset.kind {
        PresetKind::Service => "built in",
        PresetKind::Registry => "always needed",
    };
    for h in preset.hosts {
        push_entry(&mut out, h, via_fixed);
    }
    if preset.kind == PresetKind::Service {
        return out;
    }
    let sources = match preset.name {
        "pypi" => pypi::discover(discovery),
        "npm" => npm::discover(discovery),
        "crates" => crates::discover(discovery),
        "debian" => debian::discover(discovery),
        _ => Sources::default(),
    };
    out.notes.extend(sources.notes);
    for (url, via) in &sources.urls {
        match rule_from_url(url) {
            Ok(Some(rule)) => push(&mut out, rule, via),
            Ok(None) => out
                .notes
                .push(format!("skipped `{url}` ({via}): no network host")),
            Err(why) => out.notes.push(format!("skipped `{url}` ({via}): {why}")),
        }
    }
    if !sources.replaces_default {
        for h in preset.fallback {
            push_entry(&mut out, h, "default (the configuration names no index)");
        }
    }
    out
}

/// Expands several presets at once, asking the package tools in parallel (each tool's start-up,
/// a few hundred milliseconds for pip, then overlaps). Results are in the order given.
pub fn expand_all(presets: &[&'static Preset], discovery: &Discovery) -> Vec<Expansion> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = presets
            .iter()
            .map(|p| scope.spawn(move || expand(p, discovery)))
            .collect();
        handles
            .into_iter()
            .zip(presets)
            .map(|(h, p)| {
                h.join()
                    .unwrap_or_else(|_| expand(p, &Discovery::offline()))
            })
            .collect()
    })
}

fn push_entry(out: &mut Expansion, text: &str, via: &str) {
    match HostRule::parse(text) {
        Ok(rule) => push(out, rule, via),
        Err(e) => out.notes.push(format!("preset data: {e}")),
    }
}

fn push(out: &mut Expansion, rule: HostRule, via: &str) {
    if !out.hosts.iter().any(|f| f.rule == rule) {
        out.hosts.push(Found {
            rule,
            via: via.to_string(),
        });
    }
}

/// The allow entry for a source URL: its host, with the port when it is not the scheme's
/// default. `Ok(None)` for local sources (`file:`, `copy:`, `cdrom:`, paths).
/// Understands the prefixes ecosystems put before a URL (`sparse+`, `registry+`, `git+`,
/// `mirror+`, `tor+`) and bare `host[:port]`.
pub fn rule_from_url(url: &str) -> Result<Option<HostRule>, String> {
    let mut text = url.trim();
    for prefix in ["sparse+", "registry+", "git+", "mirror+", "tor+"] {
        if let Some(rest) = text.strip_prefix(prefix) {
            text = rest;
        }
    }
    let (scheme, rest) = match text.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None if text.starts_with('/') || text.starts_with('.') || text.is_empty() => {
            return Ok(None);
        }
        None if text.contains(':') && !text.contains('/') => ("https".to_string(), text),
        None if !text.contains(['/', ':']) => ("https".to_string(), text),
        None => return Err("not a URL".into()),
    };
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        "ssh" => 22,
        "git" => 9418,
        "file" | "copy" | "cdrom" => return Ok(None),
        other => return Err(format!("scheme `{other}` is not understood")),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.is_empty() {
        return Ok(None);
    }
    let (host, port) = parse_authority(authority).map_err(|e| e.reason)?;
    let port = port.unwrap_or(default_port);
    let pattern = match host {
        Host::Name(n) => HostPattern::Exact(n),
        // A preset's hosts come from configuration files; an address there would open exactly
        // what the relay refuses by class (a local service, a metadata endpoint).
        Host::Addr(a) => {
            return Err(format!(
                "presets take host names only, not addresses; allow {a} explicitly with --allow if you mean it"
            ));
        }
    };
    let port = match (scheme.as_str(), port) {
        ("https", 443) | ("http", 80) => PortSpec::Default,
        (_, p) => PortSpec::Exact(p),
    };
    Ok(Some(HostRule { pattern, port }))
}

/// Reads a file, `None` when missing or unreadable.
fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Splits a value holding several URLs (spaces, newlines, or the `\n` escapes `pip config list`
/// prints).
fn split_urls(value: &str) -> impl Iterator<Item = &str> {
    value
        .split("\\n")
        .flat_map(|s| s.split_whitespace())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nestbox_policy::find_preset;

    fn rule(url: &str) -> String {
        rule_from_url(url).unwrap().unwrap().to_string()
    }

    #[test]
    fn urls_become_host_entries() {
        assert_eq!(rule("https://pypi.org/simple"), "pypi.org");
        assert_eq!(rule("http://deb.debian.org/debian"), "deb.debian.org");
        assert_eq!(rule("https://mirror.corp:8443/pypi/"), "mirror.corp:8443");
        assert_eq!(rule("http://mirror.corp:8080"), "mirror.corp:8080");
        assert_eq!(rule("sparse+https://index.crates.io/"), "index.crates.io");
        assert_eq!(rule("https://user:pw@npm.corp/"), "npm.corp");
        assert_eq!(rule("ssh://git@git.corp/r.git"), "git.corp:22");
        assert_eq!(rule("mirror+http://mirrors.corp/list"), "mirrors.corp");
        // Addresses are never taken from configuration (a repository could point a preset at
        // the metadata service or a local port).
        assert!(rule_from_url("https://[2001:db8::1]/x").is_err());
        assert!(rule_from_url("http://127.0.0.1:18080/").is_err());
        assert!(rule_from_url("http://169.254.169.254/latest/").is_err());
        assert_eq!(rule("pypi.corp:8443"), "pypi.corp:8443");
        assert_eq!(rule_from_url("/opt/wheels").unwrap(), None);
        assert_eq!(rule_from_url("file:///srv/debs").unwrap(), None);
        assert!(rule_from_url("gopher://x/").is_err());
    }

    #[test]
    fn service_presets_expand_to_their_data() {
        let e = expand(find_preset("anthropic").unwrap(), &Discovery::offline());
        assert_eq!(e.hosts.len(), 1);
        assert_eq!(e.hosts[0].rule.to_string(), "api.anthropic.com");
        assert_eq!(e.hosts[0].via, "built in");
    }

    #[test]
    fn registry_presets_fall_back_to_defaults() {
        let d = Discovery::offline();
        let hosts = |name| -> Vec<String> {
            expand(find_preset(name).unwrap(), &d)
                .hosts
                .iter()
                .map(|f| f.rule.to_string())
                .collect()
        };
        assert_eq!(hosts("pypi"), ["files.pythonhosted.org", "pypi.org"]);
        assert_eq!(hosts("npm"), ["registry.npmjs.org"]);
        assert_eq!(
            hosts("crates"),
            ["crates.io", "static.crates.io", "index.crates.io"]
        );
        assert_eq!(hosts("debian"), ["deb.debian.org"]);
    }
}
