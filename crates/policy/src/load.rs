//! Reading a policy file. Every error carries file, line and column; unknown keys are errors.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::model::{Access, Base, NetEntry, NetMode, Origin, PathRule, Policy};
use crate::units::{parse_duration, parse_size};

/// A policy that could not be read, with the place to look.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct PolicyError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    base: Option<Spanned<String>>,
    fs: Option<RawFs>,
    net: Option<RawNet>,
    env: Option<RawEnv>,
    limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFs {
    #[serde(default)]
    read: Vec<Spanned<String>>,
    #[serde(default)]
    write: Vec<Spanned<String>>,
    #[serde(default)]
    exec: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNet {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    #[serde(default)]
    presets: Vec<Spanned<String>>,
    #[serde(default)]
    deny_ports: Vec<Spanned<i64>>,
    upstream: Option<Spanned<String>>,
    mode: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    #[serde(default)]
    pass: Vec<Spanned<String>>,
    #[serde(default)]
    set: BTreeMap<String, Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout: Option<Spanned<String>>,
    processes: Option<Spanned<i64>>,
    open_files: Option<Spanned<i64>>,
    memory: Option<Spanned<String>>,
    file_size: Option<Spanned<String>>,
    cpu: Option<Spanned<String>>,
}

/// Maps byte offsets of one file to line and column for error messages.
pub(crate) struct Locator<'a> {
    file: &'a str,
    text: &'a str,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> Self {
        Locator { file, text }
    }

    pub(crate) fn origin(&self, span: &Range<usize>) -> Origin {
        let start = span.start.min(self.text.len());
        let before = &self.text[..start];
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = self.text[line_start..start].chars().count() + 1;
        Origin::File {
            file: self.file.to_string(),
            line,
            column,
        }
    }

    pub(crate) fn error(&self, span: &Range<usize>, message: impl Into<String>) -> PolicyError {
        match self.origin(span) {
            Origin::File { file, line, column } => PolicyError {
                file,
                line,
                column,
                message: message.into(),
            },
            _ => unreachable!("Locator::origin always returns a file origin"),
        }
    }
}

/// Reads a policy file from disk.
pub fn load_file(path: &Path) -> Result<Policy, PolicyError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
        file: name.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read policy file: {e}"),
    })?;
    parse_policy(&name, &text)
}

/// Parses policy text; `file` names it in errors.
pub fn parse_policy(file: &str, text: &str) -> Result<Policy, PolicyError> {
    let loc = Locator::new(file, text);
    let raw: RawPolicy = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        loc.error(&span, e.message().trim().to_string())
    })?;
    let mut policy = Policy::default();
    if let Some(base) = raw.base {
        policy.base = match base.get_ref().as_str() {
            "default" => Base::Default,
            "none" => Base::None,
            other => {
                return Err(loc.error(
                    &base.span(),
                    format!("unknown base `{other}`: expected `default` or `none`"),
                ));
            }
        };
    }
    if let Some(fs) = raw.fs {
        for (access, list) in [
            (Access::Read, fs.read),
            (Access::Write, fs.write),
            (Access::Exec, fs.exec),
        ] {
            for item in list {
                let rule = PathRule::parse(item.get_ref(), access, loc.origin(&item.span()))
                    .map_err(|m| loc.error(&item.span(), format!("fs.{}: {m}", access.key())))?;
                policy.fs.push(rule);
            }
        }
    }
    if let Some(net) = raw.net {
        let entries = |list: Vec<Spanned<String>>| -> Vec<NetEntry> {
            list.into_iter()
                .map(|s| NetEntry {
                    origin: loc.origin(&s.span()),
                    text: s.into_inner(),
                })
                .collect()
        };
        policy.net.allow = entries(net.allow);
        policy.net.deny = entries(net.deny);
        policy.net.presets = entries(net.presets);
        for port in net.deny_ports {
            let value = *port.get_ref();
            let p = u16::try_from(value)
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| {
                    loc.error(
                        &port.span(),
                        format!("net.deny_ports: `{value}` is not a TCP port (1-65535)"),
                    )
                })?;
            policy.net.deny_ports.push(p);
        }
        if let Some(up) = net.upstream {
            policy.net.upstream = Some(NetEntry {
                origin: loc.origin(&up.span()),
                text: up.into_inner(),
            });
        }
        if let Some(mode) = net.mode {
            policy.net.mode = NetMode::parse(mode.get_ref())
                .map_err(|m| loc.error(&mode.span(), format!("net.mode: {m}")))?;
        }
    }
    if let Some(env) = raw.env {
        for name in env.pass {
            check_env_name(name.get_ref())
                .map_err(|m| loc.error(&name.span(), format!("env.pass: {m}")))?;
            policy.env.pass.push(name.into_inner());
        }
        for (name, value) in env.set {
            check_env_name(&name).map_err(|m| loc.error(&value.span(), format!("env.set: {m}")))?;
            if value.get_ref().contains('\0') {
                return Err(loc.error(&value.span(), "env.set: value contains a NUL byte"));
            }
            policy.env.set.insert(name, value.into_inner());
        }
    }
    if let Some(limits) = raw.limits {
        let duration = |v: &Spanned<String>, key: &str| {
            parse_duration(v.get_ref())
                .map_err(|m| loc.error(&v.span(), format!("limits.{key}: {m}")))
        };
        let size = |v: &Spanned<String>, key: &str| {
            parse_size(v.get_ref()).map_err(|m| loc.error(&v.span(), format!("limits.{key}: {m}")))
        };
        let count = |v: &Spanned<i64>, key: &str| {
            u64::try_from(*v.get_ref())
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    loc.error(
                        &v.span(),
                        format!("limits.{key}: must be a positive integer"),
                    )
                })
        };
        let l = &mut policy.limits;
        l.timeout = limits
            .timeout
            .as_ref()
            .map(|v| duration(v, "timeout"))
            .transpose()?;
        l.cpu = limits
            .cpu
            .as_ref()
            .map(|v| duration(v, "cpu"))
            .transpose()?;
        l.memory = limits
            .memory
            .as_ref()
            .map(|v| size(v, "memory"))
            .transpose()?;
        l.file_size = limits
            .file_size
            .as_ref()
            .map(|v| size(v, "file_size"))
            .transpose()?;
        l.processes = limits
            .processes
            .as_ref()
            .map(|v| count(v, "processes"))
            .transpose()?;
        l.open_files = limits
            .open_files
            .as_ref()
            .map(|v| count(v, "open_files"))
            .transpose()?;
    }
    Ok(policy)
}

/// Environment names are what a shell can export: letters, digits, `_`, not starting with a digit.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a valid environment variable name (letters, digits and `_`, not starting with a digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reads_every_section() {
        let p = parse_policy(
            "p.toml",
            r#"
[fs]
read = ["/etc/ssl", "?/opt/maybe"]
write = ["."]
exec = ["/usr"]
[net]
allow = ["api.anthropic.com:443", "*.githubusercontent.com"]
presets = ["pypi"]
deny_ports = [3128, 8642]
upstream = "http://10.200.0.1:3128"
mode = "port"
[env]
pass = ["LANG", "TERM"]
set = { CI = "1" }
[limits]
timeout = "30m"
processes = 256
memory = "2GiB"
"#,
        )
        .unwrap();
        assert_eq!(p.fs.len(), 4);
        assert!(p.fs[1].optional && p.fs[1].path == "/opt/maybe");
        assert_eq!(
            p.fs[0].origin,
            Origin::File {
                file: "p.toml".into(),
                line: 3,
                column: 9
            }
        );
        assert_eq!(p.net.allow.len(), 2);
        assert_eq!(p.net.deny_ports, vec![3128, 8642]);
        assert_eq!(p.net.mode, NetMode::Port);
        assert_eq!(p.env.set["CI"], "1");
        assert_eq!(p.limits.timeout, Some(Duration::from_secs(1800)));
        assert_eq!(p.limits.processes, Some(256));
        assert_eq!(p.limits.memory, Some(2 << 30));
    }

    #[test]
    fn unknown_keys_are_errors_with_position() {
        let e = parse_policy("p.toml", "[fs]\nread = []\nwrtie = [\".\"]\n").unwrap_err();
        assert_eq!((e.line, e.column), (3, 1), "{e}");
        assert!(e.message.contains("wrtie"), "{e}");
        let e = parse_policy("p.toml", "[network]\n").unwrap_err();
        assert!(e.message.contains("network"), "{e}");
    }

    #[test]
    fn bad_values_point_at_the_value() {
        let e = parse_policy("p.toml", "[limits]\ntimeout = \"30\"\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 11), "{e}");
        assert!(e.message.contains("unit is required"), "{e}");
        let e = parse_policy("p.toml", "[net]\ndeny_ports = [70000]\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("not a TCP port"), "{e}");
        let e = parse_policy("p.toml", "[fs]\nread = [\"~bob/x\"]\n").unwrap_err();
        assert!(e.message.contains("~user"), "{e}");
        let e = parse_policy("p.toml", "[env]\npass = [\"1BAD\"]\n").unwrap_err();
        assert!(e.message.contains("not a valid environment"), "{e}");
        let e = parse_policy("p.toml", "base = \"empty\"\n").unwrap_err();
        assert!(e.message.contains("unknown base"), "{e}");
    }

    #[test]
    fn malformed_toml_is_an_error_not_a_panic() {
        for text in [
            "[fs",
            "read = ",
            "[fs]\nread = \"/usr\"",
            "\u{0}",
            "[fs]\nread=[1]",
        ] {
            let e = parse_policy("bad.toml", text).unwrap_err();
            assert!(e.line >= 1, "{e}");
        }
    }
}
