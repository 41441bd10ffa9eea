//! Who is calling: a cell (by the token its relay sends) or a program, found from the client
//! socket: the connection's two addresses are looked up in `/proc/net/tcp` and `tcp6` to get
//! the client socket's inode, every process holding `socket:[inode]` is found by scanning
//! `/proc/*/fd`, and each one's executable is read from `/proc/<pid>/exe` (never `argv[0]`,
//! which a process can set to anything). Owners with different executables make the caller
//! ambiguous, and the connection is refused.
//!
//! The gateway needs to read other processes' `/proc/<pid>/fd`: it sees the processes of its own
//! user, or all of them when it runs as root. A caller it cannot see is `unknown`, and only
//! `any` rules apply to it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use nestbox_policy::gateway::Caller;
use serde::Serialize;

/// How many ancestors are read at most.
const MAX_ANCESTORS: usize = 64;

/// The identity of one connection's caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallerId {
    /// A step started by `nestbox run --gateway`.
    Cell {
        /// The cell's name (matched by `cell = "..."`).
        name: String,
        /// The step id.
        id: String,
        /// The credentials the launcher asked for.
        credentials: Vec<String>,
    },
    /// A local process.
    Program {
        /// The owner's pid (the lowest, when several processes share the socket).
        pid: i32,
        /// `/proc/<pid>/exe`.
        exe: String,
        /// The executables of its ancestors, parent first.
        ancestors: Vec<String>,
    },
    /// The socket's owner could not be found (another user's process, or it already exited).
    Unknown {
        /// Why.
        why: String,
    },
}

impl CallerId {
    /// Whether the policy caller `c` names this caller.
    pub fn is(&self, c: &Caller) -> bool {
        match (c, self) {
            (Caller::Any, _) => true,
            (Caller::Cell(g), CallerId::Cell { name, .. }) => g.matches(name),
            (
                Caller::Program { exe, descendants },
                CallerId::Program {
                    exe: mine,
                    ancestors,
                    ..
                },
            ) => exe.matches(mine) || (*descendants && ancestors.iter().any(|a| exe.matches(a))),
            _ => false,
        }
    }

    /// The audit form.
    pub fn audit(&self) -> AuditCaller {
        match self {
            CallerId::Cell { name, id, .. } => AuditCaller {
                kind: "cell",
                cell: Some(name.clone()),
                cell_id: Some(id.clone()),
                ..AuditCaller::default()
            },
            CallerId::Program { pid, exe, .. } => AuditCaller {
                kind: "program",
                pid: Some(*pid),
                exe: Some(exe.clone()),
                ..AuditCaller::default()
            },
            CallerId::Unknown { why } => AuditCaller {
                kind: "unknown",
                detail: Some(why.clone()),
                ..AuditCaller::default()
            },
        }
    }
}

impl fmt::Display for CallerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallerId::Cell { name, id, .. } => write!(f, "cell `{name}` (step {id})"),
            CallerId::Program { pid, exe, .. } => write!(f, "program {exe} (pid {pid})"),
            CallerId::Unknown { .. } => f.write_str("an unidentified caller"),
        }
    }
}

/// A caller as written to the audit log (OCSF's `actor`, flattened).
#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditCaller {
    /// `cell`, `program` or `unknown`.
    pub kind: &'static str,
    /// The cell's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
    /// The cell's step id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell_id: Option<String>,
    /// The program's pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The program's executable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Why the caller is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Why a program caller could not be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityError {
    /// Nobody visible owns the socket.
    Unknown(String),
    /// Several processes with different executables hold the socket.
    Ambiguous(Vec<(i32, String)>),
}

/// Finds the program on the other end of a connection the gateway accepted: `peer` is the
/// client's address, `local` the gateway's.
pub fn program_of(peer: SocketAddr, local: SocketAddr) -> Result<CallerId, IdentityError> {
    let inode = client_inode(peer, local).ok_or_else(|| {
        IdentityError::Unknown(format!(
            "no socket from {peer} to {local} in /proc/net/tcp (the client is in another \
             network namespace, or already gone)"
        ))
    })?;
    let owners = owners_of(inode);
    if owners.is_empty() {
        return Err(IdentityError::Unknown(format!(
            "no visible process holds the client socket (inode {inode}); the gateway sees only \
             its own user's processes unless it runs as root"
        )));
    }
    let mut named: Vec<(i32, String)> = owners
        .iter()
        .filter_map(|&pid| exe_of(pid).map(|e| (pid, e)))
        .collect();
    if named.is_empty() {
        return Err(IdentityError::Unknown(
            "the socket's owner exited before it could be identified".into(),
        ));
    }
    named.sort();
    if named.iter().any(|(_, e)| *e != named[0].1) {
        return Err(IdentityError::Ambiguous(named));
    }
    let (pid, exe) = named.swap_remove(0);
    Ok(CallerId::Program {
        pid,
        ancestors: ancestors(pid),
        exe,
    })
}

/// The inode of the client's socket: the row whose local address is `peer` and remote address
/// is `local`.
fn client_inode(peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    let want = (canon(peer), canon(local));
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            if let Some((l, r, inode)) = parse_row(line)
                && (canon(l), canon(r)) == want
                && inode != 0
            {
                return Some(inode);
            }
        }
    }
    None
}

fn canon(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// Parses one row of `/proc/net/tcp{,6}`: local address, remote address, inode.
pub(crate) fn parse_row(line: &str) -> Option<(SocketAddr, SocketAddr, u64)> {
    let mut f = line.split_whitespace();
    let _slot = f.next()?;
    let local = parse_addr(f.next()?)?;
    let remote = parse_addr(f.next()?)?;
    // st, tx:rx, tr:when, retrnsmt, uid, timeout, inode
    let inode = f.nth(6)?.parse().ok()?;
    Some((local, remote, inode))
}

fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(addr, 16).ok()?.to_le_bytes(),
        )),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                let word = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Every pid holding `socket:[inode]`.
fn owners_of(inode: u64) -> Vec<i32> {
    let target = format!("socket:[{inode}]");
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    let mut link = std::path::PathBuf::new();
    for entry in procs.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            link.clone_from(&fd.path());
            if let Ok(t) = std::fs::read_link(&link)
                && t.as_os_str().as_encoded_bytes() == target.as_bytes()
            {
                out.push(pid);
                break;
            }
        }
    }
    out
}

/// `/proc/<pid>/exe`, without the kernel's ` (deleted)` suffix.
fn exe_of(pid: i32) -> Option<String> {
    let path = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let text = path.to_string_lossy().into_owned();
    Some(text.strip_suffix(" (deleted)").unwrap_or(&text).to_string())
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name is in parentheses and may hold anything: read after the last `)`
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn ancestors(pid: i32) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = pid;
    while out.len() < MAX_ANCESTORS {
        match parent_of(cur) {
            Some(p) if p > 0 && p != cur => {
                if let Some(e) = exe_of(p) {
                    out.push(e);
                }
                cur = p;
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nestbox_policy::gateway::Glob;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn proc_rows_parse() {
        let row = "   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 20 4 30 10 -1";
        let (l, r, inode) = parse_row(row).unwrap();
        assert_eq!(l, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(r, "127.0.0.1:54321".parse().unwrap());
        assert_eq!(inode, 123456);
        let row6 = "   0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 99 1";
        let (l, r, _) = parse_row(row6).unwrap();
        assert_eq!(l, "[::1]:8080".parse().unwrap());
        assert_eq!(canon(r), "127.0.0.1:54321".parse().unwrap());
        assert!(parse_row("garbage").is_none());
    }

    #[test]
    fn this_test_process_is_found_as_the_owner_of_its_own_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_server, peer) = l.accept().unwrap();
        let id = program_of(peer, l.local_addr().unwrap()).unwrap();
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        match &id {
            CallerId::Program {
                pid,
                exe,
                ancestors,
            } => {
                assert_eq!(*pid, std::process::id() as i32);
                assert_eq!(exe, &me.to_string_lossy());
                assert!(!ancestors.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let mine = Caller::Program {
            exe: Glob::new(&me.to_string_lossy()).unwrap(),
            descendants: false,
        };
        assert!(id.is(&mine));
        let other = Caller::Program {
            exe: Glob::new("/usr/bin/curl").unwrap(),
            descendants: false,
        };
        assert!(!id.is(&other));
        drop(client);
    }
}
