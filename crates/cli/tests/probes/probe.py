"""One attack, run inside a cage and outside it (the control), answering OK or ERR <ERRNO>.

Usage: python3 probe.py KIND [ARGS...]
Every probe prints exactly one line and exits 0, so the caller compares answers, not crashes.
Raw system calls go through ctypes, because the point is to ask the kernel directly.
"""

import ctypes
import errno
import mmap
import os
import socket
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

SYS = {  # x86_64 numbers
    "getpid": 39, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "swapon": 167, "reboot": 169, "acct": 163, "init_module": 175, "delete_module": 176,
    "ptrace": 101, "setns": 308, "process_vm_readv": 310, "finit_module": 313,
    "kexec_load": 246, "kexec_file_load": 320, "add_key": 248, "request_key": 249,
    "keyctl": 250, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323,
    "open_by_handle_at": 304, "io_uring_setup": 425, "open_tree": 428, "fsopen": 430,
    "clone3": 435, "pidfd_getfd": 438, "unshare": 272, "move_mount": 429,
}


def err(e):
    code = e if isinstance(e, int) else e.errno
    return "ERR " + errno.errorcode.get(code, str(code))


def raw(name, *args):
    """A raw syscall with integer/pointer arguments; OK on success, ERR <errno> otherwise."""
    nr = SYS[name] if isinstance(name, str) else name
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r == -1:
        return err(ctypes.get_errno())
    return "OK"


def attempt(fn):
    try:
        fn()
        return "OK"
    except OSError as e:
        return err(e)


def main(kind, *a):
    if kind == "read":
        return attempt(lambda: open(a[0], "rb").read(1))
    if kind == "list":
        return attempt(lambda: os.listdir(a[0]))
    if kind == "write":
        return attempt(lambda: open(a[0], "ab").write(b"x"))
    if kind == "truncate":
        return attempt(lambda: os.truncate(a[0], 0))
    if kind == "exec":
        import subprocess
        return attempt(lambda: subprocess.run([a[0]], check=False))
    if kind == "tcp":
        return attempt(lambda: socket.create_connection((a[0], int(a[1])), timeout=5).close())
    if kind == "tcp-bind":
        def bind():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
        return attempt(bind)
    if kind == "tfo":  # TCP Fast Open: connect inside sendto, around a connect() check
        def tfo():
            s = socket.socket()
            s.sendto(b"GET / HTTP/1.0\r\n\r\n", socket.MSG_FASTOPEN, (a[0], int(a[1])))
            s.settimeout(5)
            if not s.recv(1):
                raise OSError(errno.ECONNRESET, "nothing came back")
        return attempt(tfo)
    if kind == "listen-unbound":  # listen() without bind() picks a port by itself
        def listen():
            s = socket.socket()
            s.listen()
            print("port", s.getsockname()[1], flush=True)
            if len(a) > 0:  # keep it open for a while, for the test to knock
                import time
                time.sleep(float(a[0]))
        return attempt(listen)
    if kind == "chmod":
        return attempt(lambda: os.chmod(a[0], int(a[1], 8)))
    if kind == "setxattr":
        return attempt(lambda: os.setxattr(a[0], a[1], b"x"))
    if kind == "udp":
        return attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", int(a[0]))))
    if kind == "socket":  # family type proto
        return attempt(lambda: socket.socket(int(a[0]), int(a[1]), int(a[2])).close())
    if kind == "socketpair":
        return attempt(lambda: socket.socketpair())
    if kind == "unix":
        return attempt(lambda: socket.socket(socket.AF_UNIX).connect(a[0]))
    if kind == "abstract":
        return attempt(lambda: socket.socket(socket.AF_UNIX).connect("\0" + a[0]))
    if kind == "kill":
        return attempt(lambda: os.kill(int(a[0]), int(a[1])))
    if kind == "ptrace":
        r = raw("ptrace", 16, int(a[0]), 0, 0)  # PTRACE_ATTACH
        if r == "OK":
            raw("ptrace", 17, int(a[0]), 0, 0)  # PTRACE_DETACH
        return r
    if kind == "process_vm_readv":
        buf = ctypes.create_string_buffer(8)
        local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
        remote = (ctypes.c_void_p * 2)(int(a[1], 16), 8)
        return raw("process_vm_readv", int(a[0]), ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
    if kind == "unshare-user":
        return raw("unshare", 0x10000000)  # CLONE_NEWUSER
    if kind == "clone3":
        return raw("clone3", 0, 0)  # outside: EINVAL (size 0); inside: ENOSYS
    if kind == "syscall":  # NAME ARGS... (integers)
        return raw(a[0], *[int(x, 0) for x in a[1:]])
    if kind == "x32-getpid":
        return raw(SYS["getpid"] | 0x40000000)
    if kind == "int80-getpid":
        # mov eax, 20 (i386 getpid); int 0x80; ret
        code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
        m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        m.write(code)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        r = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
        return "OK" if r > 0 else err(-r)
    if kind == "io_uring":
        params = ctypes.create_string_buffer(120)
        r = libc.syscall(ctypes.c_long(SYS["io_uring_setup"]), ctypes.c_long(4), params)
        if r >= 0:
            os.close(r)
            return "OK"
        return err(ctypes.get_errno())
    if kind == "tiocsti":
        import fcntl
        import termios
        return attempt(lambda: fcntl.ioctl(int(a[0]), termios.TIOCSTI, b"#"))
    if kind == "fd":
        return attempt(lambda: os.read(int(a[0]), 64))
    if kind == "fork-until-refused":
        children = []
        try:
            for _ in range(int(a[0])):
                pid = os.fork()
                if pid == 0:
                    import time
                    time.sleep(30)
                    os._exit(0)
                children.append(pid)
            return "OK"
        except OSError as e:
            return err(e)
        finally:
            for pid in children:
                os.kill(pid, 9)
    return "unknown probe " + kind


if __name__ == "__main__":
    print(main(*sys.argv[1:]), flush=True)
