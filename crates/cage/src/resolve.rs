//! Turning policy path entries into open files: `~` and relative paths expanded, wildcards in
//! the last component matched, missing paths refused (or skipped when marked optional).
//!
//! Each entry is opened with `O_PATH` here, in the launcher, and the descriptor goes straight
//! into the Landlock rule: what is checked is what is granted, with no window for a rename.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nestbox_policy::{Access, Origin, PathRule};

use crate::error::CageError;

/// One policy path, resolved and opened.
#[derive(Debug)]
pub struct ResolvedPath {
    pub path: PathBuf,
    pub fd: OwnedFd,
    pub is_dir: bool,
    pub access: Access,
    pub origin: Origin,
}

/// An optional entry that was skipped, kept for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SkippedPath {
    pub path: String,
    pub origin: String,
    pub reason: String,
}

/// What the resolution needs to know about the caller.
pub struct ResolveContext<'a> {
    pub workdir: &'a Path,
    pub home: Option<&'a Path>,
}

/// Expands `~` and makes a path absolute against the working directory.
pub fn expand(text: &str, ctx: &ResolveContext<'_>) -> Result<PathBuf, String> {
    let path = if text == "~" || text.starts_with("~/") {
        let home = ctx
            .home
            .ok_or("`~` used but the caller has no home directory (HOME is unset)")?;
        home.join(text.trim_start_matches('~').trim_start_matches('/'))
    } else {
        ctx.workdir.join(text)
    };
    Ok(normalize(&path))
}

/// Removes `.` components and folds `..` lexically (the policy means the path as written, not
/// wherever a symlink inside it points; the final open follows symlinks as the kernel does).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Matches `name` against a pattern whose only special character is `*`.
fn wildcard_match(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| wildcard_match(rest, &name[i..])),
        Some((c, rest)) => name.first() == Some(c) && wildcard_match(rest, &name[1..]),
    }
}

fn open_path(path: &Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory nestbox created itself (the step's private dir) for a Landlock rule.
pub fn open_dir(path: &Path) -> Result<OwnedFd, CageError> {
    open_path(path).map_err(|e| crate::error::setup(&format!("opening {}", path.display()), e))
}

/// Where an opened path really is (symlinks resolved), as the kernel reports it.
fn real_path(fd: &OwnedFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

fn is_dir(fd: &OwnedFd) -> io::Result<bool> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

fn how_to_fix(rule: &PathRule) -> String {
    match &rule.origin {
        Origin::Default => "this is a built-in default entry; please report it".into(),
        Origin::Flag(flag) => format!("check the {flag} argument"),
        Origin::File { .. } => format!(
            "create it, remove the entry, or mark it optional as `?{}`",
            rule.path
        ),
    }
}

/// Resolves one entry into zero or more open paths, appending to `out` and `skipped`.
pub fn resolve(
    rule: &PathRule,
    ctx: &ResolveContext<'_>,
    out: &mut Vec<ResolvedPath>,
    skipped: &mut Vec<SkippedPath>,
) -> Result<(), CageError> {
    let key = rule.access.key();
    let path = expand(&rule.path, ctx).map_err(|m| {
        CageError::Policy(format!("{}: {key} entry `{}`: {m}", rule.origin, rule.path))
    })?;
    let name = path.file_name().map(OsStr::as_bytes).unwrap_or_default();
    let candidates: Vec<PathBuf> = if name.contains(&b'*') {
        let parent = path.parent().unwrap_or(Path::new("/"));
        let mut matches: Vec<PathBuf> = match std::fs::read_dir(parent) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter(|e| wildcard_match(name, e.file_name().as_bytes()))
                .map(|e| e.path())
                .collect(),
            Err(_) => Vec::new(),
        };
        matches.sort();
        if matches.is_empty() {
            if rule.optional {
                skipped.push(SkippedPath {
                    path: path.display().to_string(),
                    origin: rule.origin.to_string(),
                    reason: "no match".into(),
                });
                return Ok(());
            }
            return Err(CageError::Policy(format!(
                "{}: {key} entry `{}` matches nothing ({}); {}",
                rule.origin,
                rule.path,
                path.display(),
                how_to_fix(rule)
            )));
        }
        matches
    } else {
        vec![path]
    };
    // A relative entry names something inside the working directory: the repository the step
    // runs could have made it a symlink to anywhere (`./target -> /root`), so it must stay
    // inside once resolved.
    let relative = !rule.path.starts_with('/') && !rule.path.starts_with('~');
    for path in candidates {
        let opened = open_path(&path).and_then(|fd| Ok((is_dir(&fd)?, fd)));
        match opened {
            Ok((is_dir, fd)) => {
                let real = real_path(&fd).unwrap_or_else(|| path.clone());
                if relative && !real.starts_with(ctx.workdir) {
                    return Err(CageError::Policy(format!(
                        "{}: {key} entry `{}` resolves to {}, outside the working directory {} (through a symlink); name the target itself if you mean to grant it",
                        rule.origin,
                        rule.path,
                        real.display(),
                        ctx.workdir.display()
                    )));
                }
                out.push(ResolvedPath {
                    path: real,
                    fd,
                    is_dir,
                    access: rule.access,
                    origin: rule.origin.clone(),
                })
            }
            Err(e) if rule.optional => skipped.push(SkippedPath {
                path: path.display().to_string(),
                origin: rule.origin.to_string(),
                reason: e.to_string(),
            }),
            Err(e) => {
                let what = if e.raw_os_error() == Some(libc::ENOENT) {
                    "does not exist".to_string()
                } else {
                    format!("cannot be opened ({e})")
                };
                return Err(CageError::Policy(format!(
                    "{}: {key} entry `{}` ({}) {what}; {}",
                    rule.origin,
                    rule.path,
                    path.display(),
                    how_to_fix(rule)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(w: &'a Path, h: &'a Path) -> ResolveContext<'a> {
        ResolveContext {
            workdir: w,
            home: Some(h),
        }
    }

    #[test]
    fn tilde_and_relative_paths_expand() {
        let c = ctx(Path::new("/work/repo"), Path::new("/home/u"));
        assert_eq!(expand("~/.cache", &c).unwrap(), Path::new("/home/u/.cache"));
        assert_eq!(expand("~", &c).unwrap(), Path::new("/home/u"));
        assert_eq!(expand(".", &c).unwrap(), Path::new("/work/repo"));
        assert_eq!(expand("../x", &c).unwrap(), Path::new("/work/x"));
        assert_eq!(expand("/abs/./p", &c).unwrap(), Path::new("/abs/p"));
    }

    #[test]
    fn wildcards_match_like_a_shell_star() {
        assert!(wildcard_match(b"python3*", b"python3.11"));
        assert!(wildcard_match(b"python3*", b"python3"));
        assert!(!wildcard_match(b"python3*", b"python2"));
        assert!(wildcard_match(b"*.conf", b"a.conf"));
        assert!(!wildcard_match(b"*.conf", b"a.conf.bak"));
    }

    #[test]
    fn a_relative_entry_may_not_leave_the_working_directory_through_a_symlink() {
        let work = tempfile::tempdir().unwrap();
        let work_path = std::fs::canonicalize(work.path()).unwrap();
        std::os::unix::fs::symlink("/usr", work_path.join("target")).unwrap();
        std::fs::create_dir(work_path.join("build")).unwrap();
        let c = ctx(&work_path, Path::new("/"));
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        let rule = PathRule::parse("./target", Access::Read, Origin::Flag("--read")).unwrap();
        let e = resolve(&rule, &c, &mut out, &mut skipped)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("resolves to /usr, outside the working directory"),
            "{e}"
        );
        let rule = PathRule::parse("./build", Access::Write, Origin::Flag("--write")).unwrap();
        resolve(&rule, &c, &mut out, &mut skipped).unwrap();
        assert_eq!(out[0].path, work_path.join("build"));
        // An absolute entry is the user's own choice, symlinks included.
        let rule = PathRule::parse(
            work_path.join("target").to_str().unwrap(),
            Access::Read,
            Origin::Flag("--read"),
        )
        .unwrap();
        resolve(&rule, &c, &mut out, &mut skipped).unwrap();
        assert_eq!(out[1].path, Path::new("/usr"));
    }

    #[test]
    fn missing_required_path_names_origin_and_fix() {
        let rule = PathRule::parse(
            "/nonexistent/nestbox-test",
            Access::Read,
            Origin::File {
                file: "p.toml".into(),
                line: 3,
                column: 9,
            },
        )
        .unwrap();
        let c = ctx(Path::new("/"), Path::new("/"));
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        let e = resolve(&rule, &c, &mut out, &mut skipped)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.toml:3:9:"), "{e}");
        assert!(
            e.contains("does not exist") && e.contains("`?/nonexistent"),
            "{e}"
        );
        let optional = PathRule {
            optional: true,
            ..rule
        };
        resolve(&optional, &c, &mut out, &mut skipped).unwrap();
        assert!(out.is_empty());
        assert_eq!(skipped.len(), 1);
    }
}
