//! netns mode: the step gets its own network namespace holding only `lo`, and the relay's
//! listening socket is created inside it, then handed to the launcher (a socket keeps the
//! namespace it was created in). The relay accepts there and dials from the outside namespace:
//! no bridge process, and no route out but the relay.
//!
//! The child-side functions run between fork and exec: raw system calls on data prepared here.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::sys;

/// What the child needs to set up its namespace, prepared by the launcher.
pub(crate) struct NetnsPlan {
    /// Also create a user namespace (unprivileged launchers: CLONE_NEWNET needs CAP_SYS_ADMIN).
    pub with_userns: bool,
    /// `uid_map` and `gid_map` contents mapping the launcher's ids to themselves.
    pub uid_map: CString,
    pub gid_map: CString,
    /// Where the relay listens inside the namespace.
    pub port: u16,
}

impl NetnsPlan {
    pub fn new(port: u16) -> NetnsPlan {
        // SAFETY: trivial getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        NetnsPlan {
            with_userns: uid != 0,
            uid_map: CString::new(format!("{uid} {uid} 1")).expect("no NUL"),
            gid_map: CString::new(format!("{gid} {gid} 1")).expect("no NUL"),
            port,
        }
    }
}

/// Writes `data` to a /proc file. Async-signal-safe.
unsafe fn write_file(path: &[u8], data: &CString) -> bool {
    // SAFETY: path is NUL-terminated by the callers' literals; data is a valid C string.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let bytes = data.as_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        n == bytes.len() as isize
    }
}

/// Sets the `IFF_UP` flag on `lo`.
pub(crate) unsafe fn loopback_up() -> bool {
    // SAFETY: ioctl on a throwaway socket with a zeroed, correctly sized ifreq.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return false;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut ok = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) == 0;
        if ok {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            ok = libc::ioctl(s, libc::SIOCSIFFLAGS, &req) == 0;
        }
        libc::close(s);
        ok
    }
}

/// Enters a new network namespace, brings up `lo` and listens on 127.0.0.1:port there.
/// Returns the listening socket, or the errno of the step that failed.
///
/// # Safety
/// Child side, between fork and exec.
pub(crate) unsafe fn enter(plan: &NetnsPlan) -> Result<RawFd, i32> {
    // SAFETY (whole body): raw system calls on prepared data.
    unsafe {
        let flags = if plan.with_userns {
            libc::CLONE_NEWUSER | libc::CLONE_NEWNET
        } else {
            libc::CLONE_NEWNET
        };
        if libc::unshare(flags) != 0 {
            return Err(sys::errno());
        }
        if plan.with_userns {
            let deny = CString::from(c"deny");
            if !write_file(b"/proc/self/setgroups\0", &deny)
                || !write_file(b"/proc/self/uid_map\0", &plan.uid_map)
                || !write_file(b"/proc/self/gid_map\0", &plan.gid_map)
            {
                return Err(sys::errno());
            }
        }
        listen_inside(plan.port)
    }
}

/// In the (new) network namespace: brings `lo` up and listens on 127.0.0.1:`port`.
///
/// # Safety
/// Child side, between fork and exec.
pub(crate) unsafe fn listen_inside(port: u16) -> Result<RawFd, i32> {
    // SAFETY (whole body): raw system calls on local data.
    unsafe {
        if !loopback_up() {
            return Err(sys::errno());
        }
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);

        if s < 0 {
            return Err(sys::errno());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            s,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),

            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        if libc::bind(
            s,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(s, 1024) != 0
        {
            return Err(sys::errno());
        }
        Ok(s)
    }
}

/// Sends `fd` over the launcher socket. Child side.
///
/// # Safety
/// Between fork and exec; `sock` and `fd` are open.
pub(crate) unsafe fn send_fd(sock: RawFd, fd: RawFd) -> bool {
    // SAFETY: a stack cmsg buffer large enough for one descriptor, filled per cmsg(3).
    unsafe {
        let mut byte = [b'L'];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut space = [0u64; 4]; // CMSG_SPACE(sizeof(int)) = 24 bytes, 8-aligned
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(sock, &msg, 0) == 1
    }
}

/// Receives the listener from the child, or `None` when the child sent a failure report (8
/// bytes) instead; the report is then returned in the second member.
pub(crate) fn recv_fd(sock: RawFd) -> io::Result<(Option<OwnedFd>, Vec<u8>)> {
    let mut buf = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut space = [0u64; 4];
    // SAFETY: msghdr is plain data; recvmsg fills it and the buffers it points to.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space);
    // SAFETY: valid msghdr.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: walking the control messages recvmsg filled.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
            return Ok((Some(OwnedFd::from_raw_fd(fd)), Vec::new()));
        }
    }
    Ok((None, buf[..n as usize].to_vec()))
}
