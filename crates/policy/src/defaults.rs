//! The built-in default policy: what `nestbox run -- CMD` grants with no file and no flags.
//!
//! System trees are readable and executable (exec must cover the dynamic loader, so whole trees
//! such as `/usr`, never single binaries), and so is the working directory. Of `/etc`, only the entries ordinary programs read:
//! never `/etc/ssl/private`, `/etc/shadow` or the rest. The working directory is writable. The
//! step's private temp dir (`TMPDIR`, `HOME`) is added by the cage for every step, whatever the
//! policy says. No network.

use crate::model::{Access, Limits, Origin, PathRule, Policy};

/// Trees that hold programs and libraries: read and execute. The working directory too: builds
/// and test runners execute what they compile (`target/`, `node_modules/.bin`, `./configure`),
/// and Landlock's exec right is hygiene rather than a wall (`ld.so FILE` runs readable bytes).
const EXEC: &[&str] = &[
    "/usr", "?/bin", "?/sbin", "?/lib", "?/lib64", "?/lib32", "?/libx32", ".",
];

/// Individual `/etc` entries (and a few system files) that programs need to start, resolve
/// names, verify TLS and find users. Optional: not every system has every one.
const READ: &[&str] = &[
    // TLS roots (certificates only; the keys in /etc/ssl/private stay out)
    "?/etc/ssl/certs",
    "?/etc/ssl/openssl.cnf",
    "?/etc/ca-certificates",
    "?/etc/ca-certificates.conf",
    "?/etc/pki/tls/certs",
    "?/etc/pki/ca-trust",
    // name resolution
    "?/etc/resolv.conf",
    "?/etc/hosts",
    "?/etc/host.conf",
    "?/etc/nsswitch.conf",
    "?/etc/gai.conf",
    "?/etc/services",
    "?/etc/protocols",
    // users and groups (no shadow files)
    "?/etc/passwd",
    "?/etc/group",
    // the dynamic loader
    "?/etc/ld.so.cache",
    "?/etc/ld.so.conf",
    "?/etc/ld.so.conf.d",
    // time, locale, terminal
    "?/etc/localtime",
    "?/etc/timezone",
    "?/etc/locale.alias",
    "?/etc/default/locale",
    "?/etc/terminfo",
    "?/etc/inputrc",
    // what distribution this is (pip crashes when /etc/debian_version exists but is unreadable)
    "?/etc/os-release",
    "?/etc/lsb-release",
    "?/etc/debian_version",
    "?/etc/alpine-release",
    "?/etc/redhat-release",
    "?/etc/issue",
    "?/etc/machine-id",
    // interpreters and tools that read their system-wide configuration
    "?/etc/alternatives",
    "?/etc/python3",
    "?/etc/python3.9",
    "?/etc/python3.10",
    "?/etc/python3.11",
    "?/etc/python3.12",
    "?/etc/python3.13",
    "?/etc/python3.14",
    "?/etc/pip.conf",
    "?/etc/npmrc",
    "?/etc/gitconfig",
    "?/etc/mime.types",
    "?/etc/magic",
    "?/etc/bash.bashrc",
    "?/etc/profile",
    "?/etc/environment",
    // processes: Landlock itself keeps other domains' /proc/PID/environ and mem unreadable
    "/proc",
    // CPU topology, for `nproc`, thread pools and test runners sizing themselves
    "?/sys/devices/system/cpu",
    // devices that only read
    "?/dev/urandom",
    "?/dev/random",
];

/// Devices a step may write to.
const WRITE: &[&str] = &["?/dev/null", "?/dev/zero", "?/dev/full", "?/dev/tty", "."];

/// RLIMIT_NPROC unless the policy says otherwise: enough for `make -j` and test runners, small
/// enough that a fork bomb stops early. The kernel counts every process of the user.
pub const DEFAULT_PROCESSES: u64 = 4096;

fn rules(list: &'static [&'static str], access: Access) -> impl Iterator<Item = PathRule> {
    list.iter().map(move |p| {
        PathRule::parse(p, access, Origin::Default).expect("built-in default entries are valid")
    })
}

/// The built-in default policy.
pub fn default_policy() -> Policy {
    let fs = rules(EXEC, Access::Exec)
        .chain(rules(READ, Access::Read))
        .chain(rules(WRITE, Access::Write))
        .collect();
    Policy {
        fs,
        limits: Limits {
            processes: Some(DEFAULT_PROCESSES),
            ..Limits::default()
        },
        ..Policy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_never_grants_secret_bearing_etc_entries() {
        let p = default_policy();
        for rule in &p.fs {
            for secret in [
                "/etc/ssl/private",
                "/etc/shadow",
                "/etc/gshadow",
                "/etc/sudoers",
            ] {
                assert!(
                    !secret.starts_with(rule.path.trim_end_matches('*')) || rule.path == "/",
                    "{} would expose {secret}",
                    rule.path
                );
            }
            assert_ne!(rule.path, "/etc");
            assert_ne!(rule.path, "/");
        }
    }

    #[test]
    fn default_grants_exec_on_trees_and_writes_the_workdir() {
        let p = default_policy();
        assert!(
            p.paths(Access::Exec)
                .any(|r| r.path == "/usr" && !r.optional)
        );
        assert!(p.paths(Access::Write).any(|r| r.path == "."));
        assert!(!p.net.wants_network());
    }
}
