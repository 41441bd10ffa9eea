//! Destroying disks: formatting, wiping or overwriting a raw block device. One such command
//! loses a whole file system with no undo, so these are hardline; a disk image file is fine.

use super::super::Tier;
use super::super::command::{Invocation, has_flag, operands};
use super::super::paths::is_raw_device;
use super::Rule;
use super::writes::{Via, written_paths};

pub(crate) const FORMAT: Rule = Rule {
    id: "disk.format",
    tier: Tier::Hardline,
    reason: "creates a file system on a raw disk device, erasing what is on it",
};

pub(crate) const FORMAT_UNKNOWN: Rule = Rule {
    id: "disk.format_unknown_target",
    tier: Tier::Approval,
    reason: "creates a file system on a target only known at run time",
};

pub(crate) const WIPE: Rule = Rule {
    id: "disk.wipe",
    tier: Tier::Hardline,
    reason: "wipes a raw disk device",
};

pub(crate) const PARTITION: Rule = Rule {
    id: "disk.partition",
    tier: Tier::Approval,
    reason: "changes the partition table of a disk device",
};

pub(crate) const DD: Rule = Rule {
    id: "disk.dd_to_device",
    tier: Tier::Hardline,
    reason: "`dd` writes straight onto a raw disk or memory device",
};

pub(crate) const DD_UNKNOWN: Rule = Rule {
    id: "disk.dd_unknown_target",
    tier: Tier::Approval,
    reason: "`dd` writes to a target only known at run time",
};

pub(crate) const REDIRECT: Rule = Rule {
    id: "disk.redirect_to_device",
    tier: Tier::Hardline,
    reason: "a redirection overwrites a raw disk or memory device",
};

pub(crate) const WRITE: Rule = Rule {
    id: "disk.write_to_device",
    tier: Tier::Hardline,
    reason: "writes straight onto a raw disk or memory device",
};

/// Flags any write that lands on a raw device, however it is made.
pub(crate) fn check_writes(program: Option<&str>, inv: &Invocation, sink: &mut super::Sink) {
    for (target, via) in written_paths(program, inv) {
        match (inv.path(&target), via) {
            (Some(path), via) if is_raw_device(&path) => {
                let rule = match via {
                    Via::Redirect => &REDIRECT,
                    Via::Dd => &DD,
                    Via::Program => &WRITE,
                };
                sink.hit(rule, &inv.site);
            }
            (None, Via::Dd) => sink.hit(&DD_UNKNOWN, &inv.site),
            _ => {}
        }
    }
}

fn is_mkfs(program: &str) -> bool {
    program.starts_with("mkfs")
        || program.starts_with("newfs")
        || matches!(
            program,
            "mke2fs" | "mkswap" | "mkdosfs" | "mkntfs" | "mkexfatfs"
        )
}

/// Checks formatting, wiping and partitioning tools.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    let args = inv.args();
    let devices = || operands(args).any(|a| inv.path(a).is_some_and(|p| is_raw_device(&p)));
    if is_mkfs(program) {
        if devices() {
            sink.hit(&FORMAT, &inv.site);
        } else if operands(args).any(|a| a.value().is_none()) {
            sink.hit(&FORMAT_UNKNOWN, &inv.site);
        }
        return;
    }
    let wipes = match program {
        "wipefs" => has_flag(args, 'a', &["--all"]) && !has_flag(args, 'n', &["--no-act"]),
        "blkdiscard" | "shred" => true,
        "sgdisk" => has_flag(args, 'Z', &["--zap-all"]) || has_flag(args, 'o', &["--clear"]),
        _ => false,
    };
    if wipes && devices() {
        sink.hit(&WIPE, &inv.site);
        return;
    }
    let partitions = match program {
        "fdisk" | "sfdisk" | "gdisk" | "cfdisk" => !has_flag(args, 'l', &["--list"]),
        "parted" => !has_flag(args, 'l', &["--list"]) && !args.iter().any(|a| a.is("print")),
        _ => false,
    };
    if partitions && devices() {
        sink.hit(&PARTITION, &inv.site);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn formatting_a_device_is_hardline() {
        assert_finds("mkfs.ext4 /dev/sda1", "disk.format", Tier::Hardline);
        assert_finds("mkfs -t xfs /dev/nvme0n1p2", "disk.format", Tier::Hardline);
        assert_finds("sudo mkswap /dev/sdb2", "disk.format", Tier::Hardline);
        assert_clean("mkfs.ext4 -F disk.img");
    }

    #[test]
    fn dd_onto_a_device_is_hardline() {
        assert_finds(
            "dd if=/dev/zero of=/dev/sda bs=1M",
            "disk.dd_to_device",
            Tier::Hardline,
        );
        assert_finds(
            "timeout 5 dd if=/dev/zero of=/dev/sda",
            "disk.dd_to_device",
            Tier::Hardline,
        );
        assert_finds(
            "dd if=x of=\"$DEV\"",
            "disk.dd_unknown_target",
            Tier::Approval,
        );
        assert_clean("dd if=/dev/zero of=disk.img bs=1M count=10");
        assert_clean("dd if=/dev/sda of=backup.img");
    }

    #[test]
    fn writing_onto_a_device_is_hardline() {
        assert_finds(
            "echo x > /dev/sda",
            "disk.redirect_to_device",
            Tier::Hardline,
        );
        assert_finds(
            "cat /dev/urandom >/dev/nvme0n1",
            "disk.redirect_to_device",
            Tier::Hardline,
        );
        assert_finds(
            "cat image.iso | sudo tee /dev/sdb",
            "disk.write_to_device",
            Tier::Hardline,
        );
        assert_clean("echo x > /dev/null 2>&1");
        assert_clean("echo x >&2");
    }

    #[test]
    fn wiping_and_partitioning_devices_are_caught() {
        assert_finds("wipefs -a /dev/sda", "disk.wipe", Tier::Hardline);
        assert_finds("shred -n 1 /dev/sdb", "disk.wipe", Tier::Hardline);
        assert_finds("sgdisk --zap-all /dev/sda", "disk.wipe", Tier::Hardline);
        assert_finds(
            "parted /dev/sda mklabel gpt",
            "disk.partition",
            Tier::Approval,
        );
        assert_clean("wipefs -n /dev/sda");
        assert_clean("fdisk -l /dev/sda");
        assert_clean("shred -u secret.txt");
    }
}
