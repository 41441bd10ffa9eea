//! Files nestbox itself writes where a step or its repository may have planted something (the
//! run report, the relay's audit log): opened once, before the step runs, never through a
//! symlink in the last component, never a FIFO or device, and written later through the
//! descriptor held from then on.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How to open an output file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Start empty (a report).
    Truncate,
    /// Add at the end (an audit log).
    Append,
}

/// Opens `path` for nestbox's own output: created with mode 0600 when missing, refused when the
/// last component is a symlink (ELOOP) or the file is not a regular file.
pub fn open_output(path: &Path, mode: Mode) -> io::Result<File> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    let flags = libc::O_WRONLY
        | libc::O_CREAT
        | libc::O_NOFOLLOW
        | libc::O_NONBLOCK
        | libc::O_CLOEXEC
        | match mode {
            Mode::Truncate => 0,
            Mode::Append => libc::O_APPEND,
        };
    // SAFETY: c is a valid C string; the mode argument is read because of O_CREAT.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ELOOP) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symlink; nestbox does not write through one",
                    path.display()
                ),
            ));
        }
        if e.raw_os_error() == Some(libc::ENXIO) {
            // A FIFO (or socket) without a reader: refused without blocking.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        return Err(e);
    }
    // SAFETY: a fresh descriptor we own.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if mode == Mode::Truncate {
        file.set_len(0)?;
    }
    // Back to blocking writes now that it is known to be a regular file.
    // SAFETY: F_SETFL on our own descriptor.
    unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_SETFL,
            libc::O_WRONLY | (flags & libc::O_APPEND),
        )
    };
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_fifos_and_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("link")).unwrap();
        let e = open_output(&d.path().join("link"), Mode::Truncate).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo on a fresh path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_output(&fifo, Mode::Append).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(open_output(d.path(), Mode::Append).is_err());
    }

    #[test]
    fn regular_files_are_created_private_or_appended() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("audit.jsonl");
        open_output(&p, Mode::Append)
            .unwrap()
            .write_all(b"a\n")
            .unwrap();
        open_output(&p, Mode::Append)
            .unwrap()
            .write_all(b"b\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        open_output(&p, Mode::Truncate)
            .unwrap()
            .write_all(b"c")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "c");
    }
}
