//! The machine's own state: power, services, scheduled jobs, installed packages, firewall,
//! shell history.

use super::super::Tier;
use super::super::command::{Invocation, has_flag, operands};
use super::Rule;

pub(crate) const SHUTDOWN: Rule = Rule {
    id: "system.shutdown",
    tier: Tier::Approval,
    reason: "shuts down or reboots the machine",
};

pub(crate) const SERVICE_STOP: Rule = Rule {
    id: "system.service_stop",
    tier: Tier::Approval,
    reason: "stops, disables or masks a system service",
};

pub(crate) const CRONTAB_REMOVE: Rule = Rule {
    id: "system.crontab_remove",
    tier: Tier::Approval,
    reason: "deletes the user's crontab (all scheduled jobs, no undo)",
};

pub(crate) const CRONTAB_INSTALL: Rule = Rule {
    id: "system.crontab_install",
    tier: Tier::Approval,
    reason: "replaces the user's crontab: code that runs later, on a schedule",
};

pub(crate) const PACKAGE_REMOVE: Rule = Rule {
    id: "system.package_remove",
    tier: Tier::Approval,
    reason: "removes system packages",
};

pub(crate) const FIREWALL: Rule = Rule {
    id: "system.firewall_flush",
    tier: Tier::Approval,
    reason: "flushes or disables the firewall",
};

pub(crate) const HISTORY: Rule = Rule {
    id: "system.history_clear",
    tier: Tier::Approval,
    reason: "clears the shell history (erases the record of what ran)",
};

/// The first operand, skipping options (a subcommand such as `apt remove`).
fn verb(inv: &Invocation) -> Option<&str> {
    operands(inv.args()).next().and_then(|a| a.value())
}

/// Checks power, services, cron, packages, firewall and history.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    let args = inv.args();
    let rule = match program {
        "shutdown" if !has_flag(args, 'c', &[]) => Some(&SHUTDOWN),
        "reboot" | "halt" | "poweroff" => Some(&SHUTDOWN),
        "init" | "telinit" if matches!(verb(inv), Some("0" | "6")) => Some(&SHUTDOWN),
        "systemctl" | "loginctl" => match verb(inv) {
            Some("poweroff" | "reboot" | "halt" | "kexec" | "soft-reboot") => Some(&SHUTDOWN),
            Some("stop" | "disable" | "mask" | "kill") => Some(&SERVICE_STOP),
            _ => None,
        },
        "service" if args.get(1).is_some_and(|a| a.is("stop")) => Some(&SERVICE_STOP),
        "crontab" => {
            if has_flag(args, 'r', &["--remove"]) {
                Some(&CRONTAB_REMOVE)
            } else if operands(args).next().is_some() {
                Some(&CRONTAB_INSTALL)
            } else {
                None
            }
        }
        "apt" | "apt-get" | "aptitude" => match verb(inv) {
            Some("remove" | "purge" | "autoremove" | "autopurge") => Some(&PACKAGE_REMOVE),
            _ => None,
        },
        "dpkg" if has_flag(args, 'r', &["--remove"]) || has_flag(args, 'P', &["--purge"]) => {
            Some(&PACKAGE_REMOVE)
        }
        "rpm" if has_flag(args, 'e', &["--erase"]) => Some(&PACKAGE_REMOVE),
        "yum" | "dnf" | "microdnf" | "zypper" | "snap" | "apk" => match verb(inv) {
            Some("remove" | "erase" | "autoremove" | "rm" | "del" | "purge") => {
                Some(&PACKAGE_REMOVE)
            }
            _ => None,
        },
        "pacman" => {
            let removes = args.iter().any(|a| {
                a.value().is_some_and(|v| {
                    v == "--remove" || (v.starts_with("-R") && !v.starts_with("--"))
                })
            });
            removes.then_some(&PACKAGE_REMOVE)
        }
        // pip uninstall inside a virtualenv is routine; only the system interpreter matters,
        // which shows as root (sudo) or as pip's own escape hatch.
        "pip" | "pip3" => pip_system_remove(args, inv.elevated),
        p if p.starts_with("python")
            && args.first().is_some_and(|a| a.is("-m"))
            && args.get(1).is_some_and(|a| a.is("pip")) =>
        {
            pip_system_remove(&args[2..], inv.elevated)
        }
        "iptables" | "ip6tables" | "iptables-legacy" | "iptables-nft" | "ip6tables-legacy"
        | "ip6tables-nft" => has_flag(args, 'F', &["--flush"]).then_some(&FIREWALL),
        "nft" if args.iter().any(|a| a.is("flush")) && args.iter().any(|a| a.is("ruleset")) => {
            Some(&FIREWALL)
        }
        "ufw" if matches!(verb(inv), Some("disable" | "reset")) => Some(&FIREWALL),
        "history" if has_flag(args, 'c', &[]) => Some(&HISTORY),
        _ => None,
    };
    if let Some(rule) = rule {
        sink.hit(rule, &inv.site);
    }
}

fn pip_system_remove(args: &[super::super::word::Arg], elevated: bool) -> Option<&'static Rule> {
    let uninstall = args.first().is_some_and(|a| a.is("uninstall"));
    let system = elevated || args.iter().any(|a| a.is("--break-system-packages"));
    (uninstall && system).then_some(&PACKAGE_REMOVE)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn power_and_service_changes_need_approval() {
        for cmd in [
            "shutdown -h now",
            "reboot",
            "sudo systemctl reboot",
            "init 0",
            "nice reboot",
            "/sbin/poweroff",
        ] {
            assert_finds(cmd, "system.shutdown", Tier::Approval);
        }
        assert_finds(
            "systemctl stop nginx",
            "system.service_stop",
            Tier::Approval,
        );
        assert_clean("systemctl status nginx");
        assert_clean("shutdown -c");
    }

    #[test]
    fn crontab_removal_and_replacement_need_approval() {
        assert_finds("crontab -r", "system.crontab_remove", Tier::Approval);
        assert_finds("crontab jobs.txt", "system.crontab_install", Tier::Approval);
        assert_clean("crontab -l");
    }

    #[test]
    fn system_package_removal_needs_approval() {
        for cmd in [
            "apt remove -y openssh-server",
            "sudo apt-get purge python3",
            "dpkg -r libc6",
            "yum remove bash",
            "pacman -Rns linux",
            "apk del musl",
            "sudo pip uninstall -y requests",
            "pip uninstall --break-system-packages requests",
        ] {
            assert_finds(cmd, "system.package_remove", Tier::Approval);
        }
        assert_clean("pip uninstall -y requests");
        assert_clean("apt install -y curl");
        assert_clean("pacman -Syu");
    }

    #[test]
    fn firewall_flush_and_history_clear_need_approval() {
        assert_finds("iptables -F", "system.firewall_flush", Tier::Approval);
        assert_finds(
            "iptables -t nat --flush",
            "system.firewall_flush",
            Tier::Approval,
        );
        assert_finds("nft flush ruleset", "system.firewall_flush", Tier::Approval);
        assert_finds("history -c", "system.history_clear", Tier::Approval);
        assert_clean("iptables -L -n");
        assert_clean("history | tail");
    }
}
