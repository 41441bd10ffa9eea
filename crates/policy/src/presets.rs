//! Presets: named sets of hosts one ecosystem needs, as data.
//!
//! A *service* preset (`github`, `anthropic`, ...) is a fixed list. A *registry* preset (`pypi`,
//! `npm`, `crates`, `debian`) is mostly found on the machine: the ecosystem's own configuration
//! names its index or mirror, so a corporate mirror works without edits. That discovery is I/O
//! and lives in `nestbox-net` (`registry.rs`); this module holds what never changes: the hosts
//! always needed, the ecosystem's defaults used when the configuration names nothing, and a
//! description of where discovery looks.

use std::fmt;

/// What kind of preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PresetKind {
    /// A fixed list of hosts.
    Service,
    /// Hosts read from the package tool's configuration, plus fixed ones.
    Registry,
}

impl PresetKind {
    /// `service` or `registry`.
    pub fn as_str(self) -> &'static str {
        match self {
            PresetKind::Service => "service",
            PresetKind::Registry => "registry",
        }
    }
}

/// One preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The name used in `presets = [...]` and `--preset`.
    pub name: &'static str,
    /// Service or registry.
    pub kind: PresetKind,
    /// One line for `nestbox presets`.
    pub summary: &'static str,
    /// Allow entries always included.
    pub hosts: &'static [&'static str],
    /// Registry presets: entries used when the ecosystem's configuration names no index of its
    /// own (the tool's built-in default).
    pub fallback: &'static [&'static str],
    /// Registry presets: where discovery looks, for humans.
    pub discovery: &'static str,
}

/// Every preset, sorted by name.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "anthropic",
        kind: PresetKind::Service,
        summary: "Anthropic API",
        hosts: &["api.anthropic.com"],
        fallback: &[],
        discovery: "",
    },
    Preset {
        name: "crates",
        kind: PresetKind::Registry,
        summary: "Rust crates (cargo)",
        hosts: &["crates.io", "static.crates.io", "index.crates.io"],
        fallback: &[],
        discovery: "Cargo config files (.cargo/config.toml from the working directory up, \
                    $CARGO_HOME/config.toml): [source.*] registry and [registries.*] index; \
                    CARGO_REGISTRIES_<NAME>_INDEX",
    },
    Preset {
        name: "debian",
        kind: PresetKind::Registry,
        summary: "Debian packages (apt)",
        hosts: &[],
        fallback: &["deb.debian.org"],
        discovery: "apt-get indextargets; otherwise /etc/apt/sources.list and \
                    /etc/apt/sources.list.d/*.list, *.sources",
    },
    Preset {
        name: "github",
        kind: PresetKind::Service,
        summary: "GitHub over HTTPS: git, API, release and raw downloads, container registry",
        hosts: &[
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "uploads.github.com",
            "*.githubusercontent.com",
            "ghcr.io",
        ],
        fallback: &[],
        discovery: "",
    },
    Preset {
        name: "gitlab",
        kind: PresetKind::Service,
        summary: "GitLab.com over HTTPS: git, API, container registry",
        hosts: &["gitlab.com", "registry.gitlab.com"],
        fallback: &[],
        discovery: "",
    },
    Preset {
        name: "npm",
        kind: PresetKind::Registry,
        summary: "npm packages",
        hosts: &[],
        fallback: &["registry.npmjs.org"],
        discovery: "npm config list --json (registry, @scope:registry); otherwise \
                    npm_config_registry and .npmrc files",
    },
    Preset {
        name: "openai",
        kind: PresetKind::Service,
        summary: "OpenAI API",
        hosts: &["api.openai.com"],
        fallback: &[],
        discovery: "",
    },
    Preset {
        name: "pypi",
        kind: PresetKind::Registry,
        summary: "Python packages (pip, uv)",
        hosts: &["files.pythonhosted.org"],
        fallback: &["pypi.org"],
        discovery: "pip config list (index-url, extra-index-url), PIP_INDEX_URL, \
                    PIP_EXTRA_INDEX_URL, UV_INDEX_URL, UV_DEFAULT_INDEX, UV_EXTRA_INDEX_URL, \
                    UV_INDEX; pip.conf files when pip cannot answer",
    },
];

/// A preset name that does not exist.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct UnknownPreset {
    /// The name as given.
    pub name: String,
}

impl fmt::Display for UnknownPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        write!(
            f,
            "unknown preset `{}`: known presets are {}",
            self.name,
            known.join(", ")
        )
    }
}

/// Looks a preset up by name (exact, lower case).
pub fn find_preset(name: &str) -> Result<&'static Preset, UnknownPreset> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| UnknownPreset {
            name: name.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostRule;

    #[test]
    fn every_preset_entry_parses() {
        for p in PRESETS {
            for h in p.hosts.iter().chain(p.fallback) {
                HostRule::parse(h).unwrap_or_else(|e| panic!("preset {}: {e}", p.name));
            }
        }
    }

    #[test]
    fn presets_are_sorted_and_unique() {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn the_required_presets_exist() {
        for n in [
            "github",
            "anthropic",
            "openai",
            "pypi",
            "npm",
            "crates",
            "debian",
        ] {
            assert!(find_preset(n).is_ok(), "{n}");
        }
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let e = find_preset("pip").unwrap_err().to_string();
        assert!(e.contains("unknown preset `pip`"), "{e}");
        assert!(
            e.contains("pypi") && e.contains("github") && e.contains("debian"),
            "{e}"
        );
    }
}
