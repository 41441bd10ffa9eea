//! The step's environment: it starts empty. Nothing of the caller's environment leaks in except
//! what the policy names, so tokens and agent settings in the caller's environment stay out.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nestbox_policy::EnvPolicy;

/// Directories tried for `PATH`, after the caller's own entries, when they are executable.
const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Inputs for [`build`].
pub struct EnvInputs<'a> {
    pub caller: &'a [(OsString, OsString)],
    pub policy: &'a EnvPolicy,
    /// Canonical directories the step may execute from.
    pub exec_roots: &'a [PathBuf],
    /// Trees never put on `PATH` even when executable (the working directory, the temp dir):
    /// a cloned repository must not get to shadow `ls` for the step's own scripts.
    pub not_on_path: &'a [PathBuf],
    pub home: &'a Path,
    pub tmpdir: &'a Path,
}

fn caller_var<'a>(caller: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    caller
        .iter()
        .find(|(k, _)| k.as_bytes() == name.as_bytes())
        .map(|(_, v)| v.as_os_str())
}

/// Builds `PATH` from the caller's entries and the system directories, keeping only those
/// beneath an exec root and outside `not_on_path`.
pub fn step_path(inputs: &EnvInputs<'_>) -> OsString {
    let caller_path = caller_var(inputs.caller, "PATH").unwrap_or_default();
    let candidates = caller_path
        .as_bytes()
        .split(|&b| b == b':')
        .map(|p| PathBuf::from(OsStr::from_bytes(p)))
        .chain(SYSTEM_PATH.iter().map(PathBuf::from));
    let mut chosen: Vec<PathBuf> = Vec::new();
    for dir in candidates {
        if !dir.is_absolute() || chosen.contains(&dir) {
            continue;
        }
        // Excluded by the path as written or by where it really leads (a symlink into the
        // working directory would let the step shadow commands).
        if inputs.not_on_path.iter().any(|r| dir.starts_with(r)) {
            continue;
        }
        // The common case, a plain directory under an exec root, costs one stat; only the rest
        // (symlinks such as /bin -> usr/bin) is resolved.
        let plain = inputs.exec_roots.iter().any(|r| dir.starts_with(r))
            && std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
        let ok = plain || {
            std::fs::canonicalize(&dir).is_ok_and(|real| {
                inputs.exec_roots.iter().any(|r| real.starts_with(r))
                    && !inputs.not_on_path.iter().any(|r| real.starts_with(r))
            })
        };
        if ok {
            chosen.push(dir);
        }
    }
    let joined: Vec<&[u8]> = chosen.iter().map(|p| p.as_os_str().as_bytes()).collect();
    OsString::from(OsStr::from_bytes(&joined.join(&b':')))
}

/// The complete environment of the step, sorted by name.
pub fn build(inputs: &EnvInputs<'_>, extra: &[(String, OsString)]) -> Vec<(String, OsString)> {
    let mut env: BTreeMap<String, OsString> = BTreeMap::new();
    env.insert("PATH".into(), step_path(inputs));
    env.insert("HOME".into(), inputs.home.as_os_str().to_owned());
    env.insert("TMPDIR".into(), inputs.tmpdir.as_os_str().to_owned());
    env.insert(
        "LANG".into(),
        caller_var(inputs.caller, "LANG")
            .map(OsStr::to_owned)
            .unwrap_or_else(|| "C.UTF-8".into()),
    );
    if let Some(term) = caller_var(inputs.caller, "TERM") {
        env.insert("TERM".into(), term.to_owned());
    }
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
    for name in &inputs.policy.pass {
        if let Some(v) = caller_var(inputs.caller, name) {
            env.insert(name.clone(), v.to_owned());
        }
    }
    for (k, v) in &inputs.policy.set {
        env.insert(k.clone(), v.into());
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn caller_secrets_do_not_leak_and_pass_is_explicit() {
        let caller = os(&[
            ("PATH", "/usr/bin:/root/.venv/bin"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("LANG", "de_DE.UTF-8"),
            ("CI", "1"),
        ]);
        let mut policy = EnvPolicy::default();
        policy.pass.push("CI".into());
        policy.set.insert("FOO".into(), "bar".into());
        let roots = [PathBuf::from("/usr")];
        let inputs = EnvInputs {
            caller: &caller,
            policy: &policy,
            exec_roots: &roots,
            not_on_path: &[],
            home: Path::new("/tmp/s/home"),
            tmpdir: Path::new("/tmp/s/tmp"),
        };
        let env = build(&inputs, &[]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["CI", "FOO", "HOME", "LANG", "PATH", "TMPDIR"]);
        let path = &env.iter().find(|(k, _)| k == "PATH").unwrap().1;
        assert!(!path.to_string_lossy().contains(".venv"), "{path:?}");
        assert!(
            path.to_string_lossy().split(':').any(|p| p == "/usr/bin"),
            "{path:?}"
        );
    }
}
