//! The seccomp filter: the system calls Landlock cannot see.
//!
//! A default-allow filter with a short deny list (DESIGN section 6), written as classic BPF by
//! a small assembler so that every instruction is ours to read:
//!
//! 1. the architecture is checked first: a foreign one (i386 through `int 0x80`) gets EPERM
//!    for every call, because its syscall numbers mean something else;
//! 2. x32 numbers (`nr | 0x40000000`) get EPERM, since a deny list keyed on x86_64 numbers
//!    would miss them;
//! 3. `socket` is allowed only for TCP over IPv4/IPv6; `socketpair` only for `AF_UNIX`;
//! 4. `clone` and `unshare` may not create namespaces; `clone3` returns ENOSYS (its flags live in
//!    memory the filter cannot read, and libc falls back to `clone` on ENOSYS);
//! 5. io_uring, mount, ptrace, bpf and the rest of the list return EPERM;
//! 6. `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)` (typing into a terminal) return EPERM.
//!
//! Arguments declared `int` in the kernel are compared on their low 32 bits only: the kernel
//! ignores the upper half, so a filter comparing 64 bits could be fooled by junk there.
//! Refusals are EPERM rather than a kill, so tools report an error instead of dying.

use serde::Serialize;

/// `struct sock_filter`.
pub type Insn = libc::sock_filter;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_JSET_K: u16 = 0x45;
const BPF_AND_K: u16 = 0x54;
const BPF_RET_K: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// Offset of the low 32 bits of argument `i` (little-endian targets only).
const fn off_arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("nestbox's seccomp filter supports x86_64 and aarch64 only");

/// The x32 ABI marks its syscall numbers with this bit.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Namespace flags for `clone` and `unshare`.
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWTIME) as u32;

/// System calls that always return EPERM, with the reason each is on the list.
pub const DENIED: &[(&str, libc::c_long, &str)] = &[
    (
        "io_uring_setup",
        libc::SYS_io_uring_setup,
        "io_uring operations bypass this filter",
    ),
    (
        "io_uring_enter",
        libc::SYS_io_uring_enter,
        "io_uring operations bypass this filter",
    ),
    (
        "io_uring_register",
        libc::SYS_io_uring_register,
        "io_uring operations bypass this filter",
    ),
    ("setns", libc::SYS_setns, "joining another namespace"),
    ("mount", libc::SYS_mount, "mount family"),
    ("umount2", libc::SYS_umount2, "mount family"),
    ("pivot_root", libc::SYS_pivot_root, "mount family"),
    ("chroot", libc::SYS_chroot, "mount family"),
    ("open_tree", libc::SYS_open_tree, "mount family"),
    ("move_mount", libc::SYS_move_mount, "mount family"),
    ("fsopen", libc::SYS_fsopen, "mount family"),
    ("fsconfig", libc::SYS_fsconfig, "mount family"),
    ("fsmount", libc::SYS_fsmount, "mount family"),
    ("fspick", libc::SYS_fspick, "mount family"),
    ("mount_setattr", libc::SYS_mount_setattr, "mount family"),
    ("ptrace", libc::SYS_ptrace, "tracing other processes"),
    (
        "process_vm_readv",
        libc::SYS_process_vm_readv,
        "reading other processes' memory",
    ),
    (
        "process_vm_writev",
        libc::SYS_process_vm_writev,
        "writing other processes' memory",
    ),
    (
        "pidfd_getfd",
        libc::SYS_pidfd_getfd,
        "stealing other processes' descriptors",
    ),
    ("bpf", libc::SYS_bpf, "kernel attack surface"),
    (
        "perf_event_open",
        libc::SYS_perf_event_open,
        "kernel attack surface and side channels",
    ),
    (
        "userfaultfd",
        libc::SYS_userfaultfd,
        "widens kernel race windows",
    ),
    (
        "add_key",
        libc::SYS_add_key,
        "kernel keyrings are shared outside the cage",
    ),
    (
        "request_key",
        libc::SYS_request_key,
        "kernel keyrings are shared outside the cage",
    ),
    (
        "keyctl",
        libc::SYS_keyctl,
        "kernel keyrings are shared outside the cage",
    ),
    ("kexec_load", libc::SYS_kexec_load, "replacing the kernel"),
    (
        "kexec_file_load",
        libc::SYS_kexec_file_load,
        "replacing the kernel",
    ),
    (
        "init_module",
        libc::SYS_init_module,
        "loading kernel modules",
    ),
    (
        "finit_module",
        libc::SYS_finit_module,
        "loading kernel modules",
    ),
    (
        "delete_module",
        libc::SYS_delete_module,
        "unloading kernel modules",
    ),
    (
        "open_by_handle_at",
        libc::SYS_open_by_handle_at,
        "opens files around path checks",
    ),
    (
        "name_to_handle_at",
        libc::SYS_name_to_handle_at,
        "file handle probing",
    ),
    ("swapon", libc::SYS_swapon, "system administration"),
    ("swapoff", libc::SYS_swapoff, "system administration"),
    ("reboot", libc::SYS_reboot, "system administration"),
    ("acct", libc::SYS_acct, "system administration"),
];

/// What the filter enforces, for the run report.
#[derive(Clone, Debug, Serialize)]
pub struct FilterSummary {
    pub arch: &'static str,
    pub foreign_arch: &'static str,
    pub x32: &'static str,
    pub socket: &'static str,
    pub socketpair: &'static str,
    pub clone: &'static str,
    pub clone3: &'static str,
    pub ioctl: &'static str,
    pub send: &'static str,
    pub listen: &'static str,
    pub chmod: &'static str,
    pub xattr: &'static str,
    pub denied: Vec<&'static str>,
    pub instructions: usize,
}

/// Jump targets while assembling: resolved to relative offsets in [`Asm::finish`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Next,
    Label(usize),
}

enum Op {
    Load(u32),
    And(u32),
    Jump {
        code: u16,
        k: u32,
        jt: Target,
        jf: Target,
    },
    Ret(u32),
    Label(usize),
}

/// A tiny forward-only BPF assembler with labels.
struct Asm {
    ops: Vec<Op>,
    labels: usize,
}

impl Asm {
    fn new() -> Self {
        Asm {
            ops: Vec::new(),
            labels: 0,
        }
    }
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }
    fn bind(&mut self, label: usize) {
        self.ops.push(Op::Label(label));
    }
    fn load(&mut self, off: u32) {
        self.ops.push(Op::Load(off));
    }
    fn and(&mut self, k: u32) {
        self.ops.push(Op::And(k));
    }
    fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.ops.push(Op::Jump { code, k, jt, jf });
    }
    fn ret(&mut self, v: u32) {
        self.ops.push(Op::Ret(v));
    }

    fn finish(self) -> Vec<Insn> {
        // First pass: instruction index of each label.
        let mut at = vec![usize::MAX; self.labels];
        let mut n = 0;
        for op in &self.ops {
            match op {
                Op::Label(l) => at[*l] = n,
                _ => n += 1,
            }
        }
        let mut out = Vec::with_capacity(n);
        for op in &self.ops {
            let here = out.len();
            let rel = |t: Target| -> u8 {
                match t {
                    Target::Next => 0,
                    Target::Label(l) => {
                        let dest = at[l];
                        assert!(dest != usize::MAX, "unbound label");
                        assert!(dest > here, "BPF jumps only forward");
                        u8::try_from(dest - here - 1).expect("BPF jump longer than 255")
                    }
                }
            };
            let insn = match *op {
                Op::Label(_) => continue,
                Op::Load(k) => Insn {
                    code: BPF_LD_W_ABS,
                    jt: 0,
                    jf: 0,
                    k,
                },
                Op::And(k) => Insn {
                    code: BPF_AND_K,
                    jt: 0,
                    jf: 0,
                    k,
                },
                Op::Jump { code, k, jt, jf } => Insn {
                    code,
                    jt: rel(jt),
                    jf: rel(jf),
                    k,
                },
                Op::Ret(k) => Insn {
                    code: BPF_RET_K,
                    jt: 0,
                    jf: 0,
                    k,
                },
            };
            out.push(insn);
        }
        out
    }
}

fn errno(e: i32) -> u32 {
    RET_ERRNO | (e as u32 & 0xffff)
}

/// `MSG_FASTOPEN`: connects inside `sendto`/`sendmsg`, where Landlock's connect check does not
/// look (landlock-lsm/linux#41), so it is refused outright.
const MSG_FASTOPEN: u32 = 0x2000_0000;

/// The set-user-ID and set-group-ID mode bits (refused in every chmod: a caged step has no
/// business making set-id programs, and for a root step they would be a way to root).
const SET_ID_BITS: u32 = 0o6000;

/// Extended attributes are refused with EOPNOTSUPP, as on a filesystem without them: Landlock
/// does not govern them, and an owner can grant others access through a POSIX ACL.
pub const XATTR_WRITES: &[(&str, libc::c_long)] = &[
    ("setxattr", libc::SYS_setxattr),
    ("lsetxattr", libc::SYS_lsetxattr),
    ("fsetxattr", libc::SYS_fsetxattr),
    ("removexattr", libc::SYS_removexattr),
    ("lremovexattr", libc::SYS_lremovexattr),
    ("fremovexattr", libc::SYS_fremovexattr),
];

/// What varies between steps.
#[derive(Clone, Copy, Debug, Default)]
pub struct FilterOptions {
    /// Refuse `listen`: when TCP is governed by Landlock (no network, port mode), a `listen` on
    /// an unbound socket would pick a port by itself, around Landlock's bind rule.
    pub deny_listen: bool,
}

/// The argument checks, one per call that has them.
#[derive(Clone, Copy)]
enum Check {
    Socket,
    Socketpair,
    NoNamespaces,
    Ioctl,
    /// EPERM when any bit of `mask` is set in argument `arg`.
    Flags {
        arg: u32,
        mask: u32,
    },
}

/// Builds the filter program.
pub fn build(options: FilterOptions) -> Vec<Insn> {
    use Target::*;
    let mut a = Asm::new();
    let allow = a.label();
    let eperm = a.label();
    let enotsup = a.label();

    // 1. architecture
    a.load(OFF_ARCH);
    a.jump(BPF_JEQ_K, NATIVE_ARCH, Next, Label(eperm));
    a.load(OFF_NR);
    // 2. x32
    if cfg!(target_arch = "x86_64") {
        a.jump(BPF_JGE_K, X32_SYSCALL_BIT, Label(eperm), Next);
    }
    // 5. plain denials share one return
    for &(_, nr, _) in DENIED {
        a.jump(BPF_JEQ_K, nr as u32, Label(eperm), Next);
    }
    if options.deny_listen {
        a.jump(BPF_JEQ_K, libc::SYS_listen as u32, Label(eperm), Next);
    }
    for &(_, nr) in XATTR_WRITES {
        a.jump(BPF_JEQ_K, nr as u32, Label(enotsup), Next);
    }
    // 4. clone3 -> ENOSYS
    let not_clone3 = a.label();
    a.jump(BPF_JEQ_K, libc::SYS_clone3 as u32, Next, Label(not_clone3));
    a.ret(errno(libc::ENOSYS));
    a.bind(not_clone3);

    // Calls with argument checks: each block ends in a return, so skipping it keeps A = nr.
    let mut checks: Vec<(libc::c_long, Check)> = vec![
        (libc::SYS_socket, Check::Socket),
        (libc::SYS_socketpair, Check::Socketpair),
        (libc::SYS_clone, Check::NoNamespaces),
        (libc::SYS_unshare, Check::NoNamespaces),
        (libc::SYS_ioctl, Check::Ioctl),
        (
            libc::SYS_sendto,
            Check::Flags {
                arg: 3,
                mask: MSG_FASTOPEN,
            },
        ),
        (
            libc::SYS_sendmsg,
            Check::Flags {
                arg: 2,
                mask: MSG_FASTOPEN,
            },
        ),
        (
            libc::SYS_sendmmsg,
            Check::Flags {
                arg: 3,
                mask: MSG_FASTOPEN,
            },
        ),
        (
            libc::SYS_fchmod,
            Check::Flags {
                arg: 1,
                mask: SET_ID_BITS,
            },
        ),
        (
            libc::SYS_fchmodat,
            Check::Flags {
                arg: 2,
                mask: SET_ID_BITS,
            },
        ),
        (
            libc::SYS_fchmodat2,
            Check::Flags {
                arg: 2,
                mask: SET_ID_BITS,
            },
        ),
    ];
    #[cfg(target_arch = "x86_64")]
    checks.push((
        libc::SYS_chmod,
        Check::Flags {
            arg: 1,
            mask: SET_ID_BITS,
        },
    ));
    for (nr, check) in checks {
        let skip = a.label();
        a.jump(BPF_JEQ_K, nr as u32, Next, Label(skip));
        match check {
            Check::Socket => socket_block(&mut a, allow, eperm),
            Check::Socketpair => socketpair_block(&mut a, allow, eperm),
            Check::NoNamespaces => no_namespaces_block(&mut a, allow, eperm),
            Check::Ioctl => ioctl_block(&mut a, allow, eperm),
            Check::Flags { arg, mask } => {
                a.load(off_arg_lo(arg));
                a.jump(BPF_JSET_K, mask, Label(eperm), Label(allow));
            }
        }
        a.bind(skip);
    }
    a.bind(allow);
    a.ret(RET_ALLOW);
    a.bind(eperm);
    a.ret(errno(libc::EPERM));
    a.bind(enotsup);
    a.ret(errno(libc::EOPNOTSUPP));
    a.finish()
}

/// socket(domain, type, protocol): TCP over IPv4/IPv6 only.
fn socket_block(a: &mut Asm, allow: usize, eperm: usize) {
    use Target::*;
    let inet = a.label();
    let tcp = a.label();
    a.load(off_arg_lo(0));
    a.jump(BPF_JEQ_K, libc::AF_INET as u32, Label(inet), Next);
    a.jump(BPF_JEQ_K, libc::AF_INET6 as u32, Label(inet), Label(eperm));
    a.bind(inet);
    a.load(off_arg_lo(1));
    a.and(!((libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u32));
    a.jump(
        BPF_JEQ_K,
        libc::SOCK_STREAM as u32,
        Label(tcp),
        Label(eperm),
    );
    a.bind(tcp);
    a.load(off_arg_lo(2));
    a.jump(BPF_JEQ_K, 0, Label(allow), Next);
    a.jump(
        BPF_JEQ_K,
        libc::IPPROTO_TCP as u32,
        Label(allow),
        Label(eperm),
    );
}

/// socketpair(domain, ...): AF_UNIX only (pipes between the step's own processes).
fn socketpair_block(a: &mut Asm, allow: usize, eperm: usize) {
    a.load(off_arg_lo(0));
    a.jump(
        BPF_JEQ_K,
        libc::AF_UNIX as u32,
        Target::Label(allow),
        Target::Label(eperm),
    );
}

/// clone(flags, ...) and unshare(flags): no new namespaces. Flags are argument 0 of both, on
/// x86_64 and aarch64.
fn no_namespaces_block(a: &mut Asm, allow: usize, eperm: usize) {
    a.load(off_arg_lo(0));
    a.jump(
        BPF_JSET_K,
        NAMESPACE_FLAGS,
        Target::Label(eperm),
        Target::Label(allow),
    );
}

/// ioctl(fd, cmd, ...): no typing into terminals.
fn ioctl_block(a: &mut Asm, allow: usize, eperm: usize) {
    use Target::*;
    a.load(off_arg_lo(1));
    a.jump(BPF_JEQ_K, libc::TIOCSTI as u32, Label(eperm), Next);
    a.jump(
        BPF_JEQ_K,
        libc::TIOCLINUX as u32,
        Label(eperm),
        Label(allow),
    );
}

/// What [`build`] enforces, in words.
pub fn summary(options: FilterOptions, program_len: usize) -> FilterSummary {
    FilterSummary {
        arch: if cfg!(target_arch = "x86_64") {
            "x86_64"
        } else {
            "aarch64"
        },
        foreign_arch: "EPERM for every call (e.g. i386 via int 0x80)",
        x32: if cfg!(target_arch = "x86_64") {
            "EPERM for every x32 call"
        } else {
            "not applicable"
        },
        socket: "only AF_INET/AF_INET6 SOCK_STREAM with protocol 0 or TCP; everything else EPERM (unix, UDP, raw, netlink, vsock, MPTCP, SCTP)",
        socketpair: "only AF_UNIX",
        clone: "namespace flags EPERM",
        clone3: "ENOSYS (libc falls back to clone)",
        ioctl: "TIOCSTI and TIOCLINUX EPERM",
        send: "MSG_FASTOPEN EPERM (it would connect around Landlock's connect check)",
        listen: if options.deny_listen {
            "EPERM (an unbound listen would pick a port around Landlock's bind rule)"
        } else {
            "allowed (inside the step's own network namespace)"
        },
        chmod: "set-user-ID and set-group-ID bits EPERM",
        xattr: "setting or removing extended attributes (POSIX ACLs) EOPNOTSUPP",
        denied: DENIED.iter().map(|d| d.0).collect(),
        instructions: program_len,
    }
}

/// Whether seccomp filters that answer with an errno can be installed here (asked of the kernel
/// with `SECCOMP_GET_ACTION_AVAIL`, the same call path the install takes).
pub fn available() -> Result<(), String> {
    let action: u32 = RET_ERRNO;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads a u32 from a valid pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// Installs `program` on the calling thread. Meant for the child between fork and exec:
/// no allocation. Requires no_new_privs (set just before).
///
/// # Safety
/// `program` must stay alive for the duration of the call (the kernel copies it).
pub unsafe fn install_raw(program: &[Insn]) -> libc::c_long {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut Insn,
    };
    // SAFETY: prog points at a live program; the kernel copies it before returning.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &prog as *const libc::sock_fprog,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BPF interpreter for the handful of opcodes we emit, to test the program's decisions
    /// without installing it.
    fn run(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let mut acc: u32 = 0;
        let mut pc = 0;
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                BPF_LD_W_ABS => {
                    let o = i.k as usize;
                    acc = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
                }
                BPF_AND_K => acc &= i.k,
                BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                    let taken = match i.code {
                        BPF_JEQ_K => acc == i.k,
                        BPF_JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                BPF_RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn call(nr: libc::c_long, args: [u64; 6]) -> u32 {
        run(
            &build(FilterOptions { deny_listen: true }),
            NATIVE_ARCH,
            nr as u32,
            args,
        )
    }

    const EPERM: u32 = RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn ordinary_calls_are_allowed() {
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_execve,
            libc::SYS_openat,
        ] {
            assert_eq!(call(nr, [0; 6]), RET_ALLOW);
        }
    }

    #[test]
    fn socket_allows_only_tcp() {
        let s = |d: i32, t: i32, p: i32| {
            call(libc::SYS_socket, [d as u64, t as u64, p as u64, 0, 0, 0])
        };
        assert_eq!(s(libc::AF_INET, libc::SOCK_STREAM, 0), RET_ALLOW);
        assert_eq!(
            s(
                libc::AF_INET6,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::IPPROTO_TCP
            ),
            RET_ALLOW
        );
        assert_eq!(s(libc::AF_UNIX, libc::SOCK_STREAM, 0), EPERM);
        assert_eq!(s(libc::AF_INET, libc::SOCK_DGRAM, 0), EPERM);
        assert_eq!(s(libc::AF_INET, libc::SOCK_RAW, 1), EPERM);
        assert_eq!(s(libc::AF_INET, libc::SOCK_STREAM, 262), EPERM, "MPTCP");
        assert_eq!(s(libc::AF_NETLINK, libc::SOCK_RAW, 0), EPERM);
        assert_eq!(s(libc::AF_VSOCK, libc::SOCK_STREAM, 0), EPERM);
    }

    #[test]
    fn junk_in_upper_argument_bits_does_not_change_the_verdict() {
        let junk = 0xdead_beef_0000_0000u64;
        let r = call(
            libc::SYS_socket,
            [
                junk | libc::AF_UNIX as u64,
                libc::SOCK_STREAM as u64,
                0,
                0,
                0,
                0,
            ],
        );
        assert_eq!(r, EPERM);
        let r = call(
            libc::SYS_ioctl,
            [0, junk | 0x5412 /* TIOCSTI */, 0, 0, 0, 0],
        );
        assert_eq!(r, EPERM);
    }

    #[test]
    fn namespaces_clone3_and_foreign_arches_are_refused() {
        assert_eq!(
            call(
                libc::SYS_unshare,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]
            ),
            EPERM
        );
        assert_eq!(
            call(libc::SYS_unshare, [libc::CLONE_FILES as u64, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            call(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            call(
                libc::SYS_clone,
                [(libc::CLONE_NEWNET | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0]
            ),
            EPERM
        );
        assert_eq!(
            call(libc::SYS_clone3, [0; 6]),
            RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(
            call(libc::SYS_socketpair, [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            run(&build(FilterOptions::default()), 0x4000_0003, 20, [0; 6]),
            EPERM,
            "i386"
        );
        if cfg!(target_arch = "x86_64") {
            assert_eq!(call(libc::SYS_getpid | 0x4000_0000, [0; 6]), EPERM, "x32");
        }
    }

    #[test]
    fn tcp_fast_open_set_id_modes_and_xattr_writes_are_refused() {
        let fastopen = 0x2000_0000u64;
        assert_eq!(call(libc::SYS_sendto, [3, 0, 0, fastopen, 0, 0]), EPERM);
        assert_eq!(
            call(libc::SYS_sendto, [3, 0, 0, libc::MSG_NOSIGNAL as u64, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            call(libc::SYS_sendmsg, [3, 0, fastopen | 0x4000, 0, 0, 0]),
            EPERM
        );
        assert_eq!(call(libc::SYS_sendmmsg, [3, 0, 1, fastopen, 0, 0]), EPERM);
        assert_eq!(call(libc::SYS_fchmodat, [0, 0, 0o4755, 0, 0, 0]), EPERM);
        assert_eq!(call(libc::SYS_fchmodat, [0, 0, 0o755, 0, 0, 0]), RET_ALLOW);
        assert_eq!(call(libc::SYS_fchmod, [3, 0o2755, 0, 0, 0, 0]), EPERM);
        let enotsup = RET_ERRNO | libc::EOPNOTSUPP as u32;
        for &(name, nr) in XATTR_WRITES {
            assert_eq!(call(nr, [0; 6]), enotsup, "{name}");
        }
    }

    #[test]
    fn listen_is_refused_only_where_landlock_governs_tcp() {
        assert_eq!(call(libc::SYS_listen, [3, 1, 0, 0, 0, 0]), EPERM);
        let own_netns = build(FilterOptions { deny_listen: false });
        assert_eq!(
            run(
                &own_netns,
                NATIVE_ARCH,
                libc::SYS_listen as u32,
                [3, 1, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
    }

    #[test]
    fn every_denied_call_is_refused() {
        for &(name, nr, _) in DENIED {
            assert_eq!(call(nr, [0; 6]), EPERM, "{name}");
        }
    }
}
