//! What a path argument points at, decided lexically (the guard never touches the file system:
//! the command may run on another backend, and the file may not exist yet).

/// Top-level directories that hold the operating system.
const SYSTEM_DIRS: &[&str] = &[
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "snap", "sys",
    "usr", "var",
];

/// Directories inside a home whose loss locks the user out or loses keys.
const PRECIOUS_HOME_DIRS: &[&str] = &[".ssh", ".gnupg"];

/// Files a shell runs at start-up: writing one plants code that runs in every later session.
const STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
];

/// Where a path is, lexically.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Located {
    /// True when the path is absolute (home paths are made absolute under `/home`).
    absolute: bool,
    /// Components after resolving `.` and `..`.
    parts: Vec<String>,
    /// A relative path that climbs above its starting directory.
    escapes: bool,
}

fn locate(path: &str) -> Located {
    let (absolute, mut parts, rest) = if let Some(rest) = path.strip_prefix('~') {
        // `~` and `~user` sit under /home for our purposes (root's is /root, handled alike).
        let (user, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let user = if user.is_empty() { "~" } else { user };
        (true, vec!["home".to_owned(), user.to_owned()], rest)
    } else if let Some(rest) = path.strip_prefix('/') {
        (true, Vec::new(), rest)
    } else {
        (false, Vec::new(), path)
    };
    let mut escapes = false;
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                // `/..` is `/`; a relative `..` past the start leaves the working directory.
                if parts.pop().is_none() && !absolute {
                    escapes = true;
                }
            }
            p => parts.push(p.to_owned()),
        }
    }
    Located {
        absolute,
        parts,
        escapes,
    }
}

/// True when a path component is made only of glob characters (`*`, `.*`, `?*`, `[a-z]*`), so it
/// matches (nearly) every entry of its directory.
fn is_wildcard(part: &str) -> bool {
    if !part.contains(['*', '?']) {
        return false;
    }
    let mut in_bracket = false;
    for c in part.chars() {
        match c {
            '[' => in_bracket = true,
            ']' => in_bracket = false,
            _ if in_bracket => {}
            '*' | '?' | '.' => {}
            _ => return false,
        }
    }
    true
}

fn has_glob(part: &str) -> bool {
    part.contains(['*', '?', '['])
}

/// How wide a delete of this path would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// `/`, `/*` and spellings of them.
    Root,
    /// A home directory (`~`, `$HOME`, `/home`, `/home/x`, `/root`) or its keys.
    Home,
    /// The operating system's directories and anything under them.
    System,
    /// A top-level directory such as `/opt` or `/tmp`, or all of its entries.
    TopLevel,
    /// A relative path that climbs out of the working directory (`..`, `../x`).
    Parent,
    /// The working directory itself or all of its entries (`.`, `*`).
    Workdir,
    /// A git repository's history (`.git`).
    GitDir,
    /// A path known only at run time.
    Unknown,
    /// Anything narrower: a build directory, a temp file.
    Narrow,
}

/// How wide a delete of `path` would be; `None` is a value known only at run time.
pub(crate) fn reach(path: Option<&str>) -> Reach {
    let Some(path) = path else {
        return Reach::Unknown;
    };
    let loc = locate(path);
    let parts: Vec<&str> = loc.parts.iter().map(String::as_str).collect();
    if parts.last() == Some(&".git") {
        return Reach::GitDir;
    }
    if !loc.absolute {
        return if loc.escapes {
            Reach::Parent
        } else if parts.is_empty() || (parts.len() == 1 && is_wildcard(parts[0])) {
            Reach::Workdir
        } else {
            Reach::Narrow
        };
    }
    let Some(first) = parts.first().copied() else {
        return Reach::Root;
    };
    if parts.iter().all(|p| is_wildcard(p)) {
        return Reach::Root;
    }
    if has_glob(first) {
        // `/e*` may well be `/etc`.
        return Reach::System;
    }
    let wide_tail = |n: usize| parts.len() == n || (parts.len() == n + 1 && is_wildcard(parts[n]));
    match first {
        "home" => {
            if wide_tail(1)
                || wide_tail(2)
                || PRECIOUS_HOME_DIRS.contains(&parts.get(2).copied().unwrap_or(""))
            {
                Reach::Home
            } else {
                Reach::Narrow
            }
        }
        "root" => {
            if wide_tail(1) || PRECIOUS_HOME_DIRS.contains(&parts.get(1).copied().unwrap_or("")) {
                Reach::Home
            } else {
                Reach::Narrow
            }
        }
        "var" if parts.get(1) == Some(&"tmp") && parts.len() > 2 => Reach::Narrow,
        "dev" if parts.get(1) == Some(&"shm") && parts.len() > 2 => Reach::Narrow,
        d if SYSTEM_DIRS.contains(&d) => Reach::System,
        _ if wide_tail(1) => Reach::TopLevel,
        _ => Reach::Narrow,
    }
}

/// True when `path` names a raw disk or memory device, where one write destroys a file system
/// (or the running kernel).
pub(crate) fn is_raw_device(path: &str) -> bool {
    let loc = locate(path);
    if !loc.absolute || loc.parts.len() < 2 || loc.parts[0] != "dev" {
        return false;
    }
    let name = loc.parts[1].as_str();
    if matches!(name, "mapper" | "disk" | "md") && loc.parts.len() > 2 {
        return true;
    }
    if matches!(name, "mem" | "kmem" | "port" | "root") {
        return true;
    }
    const DISK_PREFIXES: &[&str] = &[
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "md", "dm-", "loop", "nbd", "zram", "disk",
        "rdisk",
    ];
    DISK_PREFIXES.iter().any(|p| {
        name.strip_prefix(p).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '*' || c == '?' || c == '[')
        })
    })
}

/// Why writing to a path matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sensitive {
    /// A shell start-up file: code written there runs in every later shell.
    Startup,
    /// SSH keys and configuration (`authorized_keys` grants logins).
    Ssh,
    /// Operating-system configuration, binaries, boot files or kernel knobs.
    System,
}

/// Whether writing to `path` plants code, grants access or changes the operating system.
pub(crate) fn sensitive_write(path: &str) -> Option<Sensitive> {
    let loc = locate(path);
    let parts: Vec<&str> = loc.parts.iter().map(String::as_str).collect();
    let name = parts.last().copied().unwrap_or("");
    if parts.contains(&".ssh") || name == "authorized_keys" || name == "authorized_keys2" {
        return Some(Sensitive::Ssh);
    }
    if STARTUP_FILES.contains(&name) || parts.ends_with(&[".config", "fish", "config.fish"]) {
        return Some(Sensitive::Startup);
    }
    if !loc.absolute {
        return None;
    }
    match parts.as_slice() {
        [
            "etc",
            "profile" | "bash.bashrc" | "environment" | "zshrc" | "zprofile" | "zshenv",
        ] => Some(Sensitive::Startup),
        ["etc", "profile.d" | "zsh", ..] => Some(Sensitive::Startup),
        [
            "etc" | "boot" | "usr" | "bin" | "sbin" | "lib" | "lib32" | "lib64" | "sys",
            ..,
        ] => Some(Sensitive::System),
        ["proc", "sys" | "sysrq-trigger", ..] => Some(Sensitive::System),
        ["var", "spool", "cron", ..] => Some(Sensitive::System),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_root_reach_root() {
        for p in [
            "/", "//", "/.", "/..", "/*", "/./*", "/.*", "/*/*", "/usr/..",
        ] {
            assert_eq!(reach(Some(p)), Reach::Root, "{p}");
        }
    }

    #[test]
    fn home_spellings_reach_home() {
        for p in [
            "~",
            "~/",
            "~/*",
            "~/.ssh",
            "/home",
            "/home/alice",
            "/home/*",
            "/root",
            "~bob",
            "~/..",
        ] {
            assert_eq!(reach(Some(p)), Reach::Home, "{p}");
        }
        assert_eq!(reach(Some("~/project/build")), Reach::Narrow);
    }

    #[test]
    fn system_and_top_level_paths_are_wide() {
        assert_eq!(reach(Some("/etc")), Reach::System);
        assert_eq!(reach(Some("/usr/local/lib")), Reach::System);
        assert_eq!(reach(Some("/e*")), Reach::System);
        assert_eq!(reach(Some("/opt")), Reach::TopLevel);
        assert_eq!(reach(Some("/tmp/*")), Reach::TopLevel);
        assert_eq!(reach(Some("/tmp/build")), Reach::Narrow);
        assert_eq!(reach(Some("/var/tmp/x")), Reach::Narrow);
    }

    #[test]
    fn relative_paths_are_narrow_unless_they_escape_or_cover_everything() {
        assert_eq!(reach(Some("./build")), Reach::Narrow);
        assert_eq!(reach(Some("node_modules")), Reach::Narrow);
        assert_eq!(reach(Some("build/..")), Reach::Workdir);
        assert_eq!(reach(Some("*")), Reach::Workdir);
        assert_eq!(reach(Some(".")), Reach::Workdir);
        assert_eq!(reach(Some("../x")), Reach::Parent);
        assert_eq!(reach(Some("a/../../x")), Reach::Parent);
        assert_eq!(reach(Some(".git")), Reach::GitDir);
        assert_eq!(reach(None), Reach::Unknown);
    }

    #[test]
    fn raw_devices_are_recognised_and_pseudo_devices_are_not() {
        for p in [
            "/dev/sda",
            "/dev/sdb1",
            "/dev/nvme0n1",
            "/dev/mapper/root",
            "/dev/disk/by-id/x",
            "/dev/mem",
            "/dev/md0",
            "/dev/sd*",
        ] {
            assert!(is_raw_device(p), "{p}");
        }
        for p in [
            "/dev/null",
            "/dev/zero",
            "/dev/stdout",
            "/dev/tty",
            "/dev/shm/x",
            "/dev/fd/1",
            "~/dev/sda",
            "dev/sda",
        ] {
            assert!(!is_raw_device(p), "{p}");
        }
    }

    #[test]
    fn startup_ssh_and_system_files_are_sensitive() {
        assert_eq!(sensitive_write("~/.bashrc"), Some(Sensitive::Startup));
        assert_eq!(sensitive_write("/root/.profile"), Some(Sensitive::Startup));
        assert_eq!(
            sensitive_write("~/.ssh/authorized_keys"),
            Some(Sensitive::Ssh)
        );
        assert_eq!(sensitive_write("/etc/sudoers.d/x"), Some(Sensitive::System));
        assert_eq!(
            sensitive_write("/etc/profile.d/evil.sh"),
            Some(Sensitive::Startup)
        );
        assert_eq!(
            sensitive_write("/proc/sysrq-trigger"),
            Some(Sensitive::System)
        );
        assert_eq!(sensitive_write("out.txt"), None);
        assert_eq!(sensitive_write("/tmp/x"), None);
        assert_eq!(sensitive_write("/dev/null"), None);
    }
}
