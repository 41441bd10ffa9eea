//! The `ssh` command lines and the shared connection.
//!
//! One master connection per destination (`ControlMaster`, socket in a short private
//! directory, `ControlPersist`), started explicitly with its standard streams on `/dev/null`:
//! a master that some command's `ssh` forked on the fly would keep that command's pipes open
//! for as long as it persists. Every session then multiplexes over it with
//! `ControlMaster=no`; if the master is gone, a session falls back to a direct connection by
//! itself, and the next [`Connection::ensure_master`] starts a new master.
//!
//! Always on the command line: `BatchMode=yes` (never a prompt), the host key policy
//! (`StrictHostKeyChecking=yes` or `accept-new`, never `no`), the known-hosts file when one is
//! configured, the connect timeout, keep-alives. ssh's own messages go to a log file (`-E`),
//! so they never mix with the command's standard error.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::backend::BackendKind;
use crate::config::{HostKeyPolicy, SshConfig};
use crate::error::{ExecError, Result};
use crate::output::Capture;

/// How one `ssh` session ended.
pub(crate) struct SessionEnd {
    /// ssh's exit status: the remote command's, or 255 when ssh itself failed. `None` when
    /// the session was cut off locally (deadline).
    pub code: Option<i32>,
}

/// Everything needed to talk to one destination.
pub(crate) struct Connection {
    program: PathBuf,
    destination: String,
    options: Vec<String>,
    control_path: PathBuf,
    lock_path: PathBuf,
    log_path: PathBuf,
    persist: Duration,
}

fn key_of(config: &SshConfig) -> String {
    let text = format!(
        "{:?}@{}:{:?}|{:?}|{:?}",
        config.user, config.host, config.port, config.identity, config.known_hosts
    );
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A private directory: created mode 700, refused if someone else owns it or others can
/// enter it (the control socket inside is a live, authenticated connection).
fn private_dir(dir: &Path) -> Result<()> {
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    let meta = std::fs::metadata(dir)
        .map_err(|e| ExecError::io(format!("creating {}", dir.display()), e))?;
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    if meta.uid() == me && meta.permissions().mode() & 0o077 != 0 {
        // Ours but open to others: close it (it holds nothing but our sockets and logs).
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let meta = std::fs::metadata(dir)
        .map_err(|e| ExecError::io(format!("checking {}", dir.display()), e))?;
    if meta.uid() != me || meta.permissions().mode() & 0o077 != 0 {
        return Err(ExecError::InvalidConfig {
            backend: BackendKind::Ssh,
            reason: format!(
                "{} must be a directory of ours that nobody else can enter (owner {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.permissions().mode() & 0o777
            ),
        });
    }
    Ok(())
}

impl Connection {
    /// Builds the command line for `config`; nothing connects yet.
    pub fn new(config: &SshConfig) -> Result<Connection> {
        if config.host.trim().is_empty() {
            return Err(ExecError::InvalidConfig {
                backend: BackendKind::Ssh,
                reason: "no host: set host".into(),
            });
        }
        if config.host.starts_with('-')
            || config.user.as_deref().is_some_and(|u| u.starts_with('-'))
        {
            return Err(ExecError::InvalidConfig {
                backend: BackendKind::Ssh,
                reason: "host and user may not start with '-'".into(),
            });
        }
        // SAFETY: geteuid has no failure mode.
        let uid = unsafe { libc::geteuid() };
        let dir = config
            .control_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("/tmp/nestbox-ssh-{uid}")));
        private_dir(&dir)?;
        let key = key_of(config);
        let mut o: Vec<String> = Vec::new();
        let mut opt = |k: &str, v: String| {
            o.push("-o".into());
            o.push(format!("{k}={v}"));
        };
        opt("BatchMode", "yes".into());
        opt(
            "StrictHostKeyChecking",
            match config.host_key_policy {
                HostKeyPolicy::Strict => "yes".into(),
                HostKeyPolicy::AcceptNew => "accept-new".into(),
            },
        );
        if let Some(k) = &config.known_hosts {
            opt("UserKnownHostsFile", k.display().to_string());
            opt("GlobalKnownHostsFile", "/dev/null".into());
        }
        opt(
            "ConnectTimeout",
            config.connect_timeout.as_secs().max(1).to_string(),
        );
        opt("ServerAliveInterval", "10".into());
        opt("ServerAliveCountMax", "3".into());
        opt(
            "ControlPath",
            dir.join(format!("{key}.sock")).display().to_string(),
        );
        opt("LogLevel", "ERROR".into());
        if let Some(id) = &config.identity {
            opt("IdentitiesOnly", "yes".into());
            o.push("-i".into());
            o.push(id.display().to_string());
        }
        if let Some(port) = config.port {
            o.push("-p".into());
            o.push(port.to_string());
        }
        if let Some(user) = &config.user {
            o.push("-l".into());
            o.push(user.clone());
        }
        let log_path = dir.join(format!("{key}.log"));
        o.push("-E".into());
        o.push(log_path.display().to_string());
        Ok(Connection {
            program: config
                .ssh_program
                .clone()
                .unwrap_or_else(|| PathBuf::from("ssh")),
            destination: config.host.clone(),
            control_path: dir.join(format!("{key}.sock")),
            lock_path: dir.join(format!("{key}.lock")),
            log_path,
            options: o,
            persist: config.control_persist,
        })
    }

    /// `user@host:port`, for messages.
    pub fn describe(&self, config: &SshConfig) -> String {
        format!(
            "{}{}{}",
            config
                .user
                .as_ref()
                .map(|u| format!("{u}@"))
                .unwrap_or_default(),
            config.host,
            config.port.map(|p| format!(":{p}")).unwrap_or_default()
        )
    }

    /// The control socket's path (the master's, when one runs).
    pub fn control_path(&self) -> &Path {
        &self.control_path
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join("; ")
    }

    fn master_alive(&self) -> bool {
        std::os::unix::net::UnixStream::connect(&self.control_path).is_ok()
    }

    /// Makes sure a master connection runs: when the control socket does not answer, starts
    /// one (serialized with other processes by a lock file, so only one master per
    /// destination). Fails with the reason ssh gave (refused, host key, authentication).
    pub async fn ensure_master(&self) -> Result<()> {
        if self.master_alive() {
            return Ok(());
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)
            .map_err(|e| ExecError::io(format!("opening {}", self.lock_path.display()), e))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&lock);
        // The lock is held for one connection set-up at most (ConnectTimeout bounds it).
        let _ = tokio::task::spawn_blocking(move || {
            // SAFETY: flock(2) on a descriptor that lives until the end of this function.
            unsafe { libc::flock(fd, libc::LOCK_EX) }
        })
        .await;
        if self.master_alive() {
            return Ok(());
        }
        let _ = std::fs::remove_file(&self.control_path);
        if let Ok(meta) = std::fs::metadata(&self.log_path)
            && meta.len() > 1 << 20
        {
            let _ = std::fs::write(&self.log_path, b"");
        }
        let status = tokio::process::Command::new(&self.program)
            .args(&self.options)
            .args(["-o", "ControlMaster=yes"])
            .arg("-o")
            .arg(format!("ControlPersist={}", self.persist.as_secs().max(1)))
            .args(["-N", "-f", "-T", "--"])
            .arg(&self.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map_err(|e| ExecError::Unavailable {
                backend: BackendKind::Ssh,
                reason: format!("cannot run {}: {e}", self.program.display()),
                hint: Some("install openssh-client".into()),
            })?;
        drop(lock);
        if !status.success() || !self.master_alive() {
            return Err(ExecError::Unavailable {
                backend: BackendKind::Ssh,
                reason: format!("cannot connect to {}: {}", self.destination, self.log_tail()),
                hint: Some("check host, port, user, identity, and that the host key is in the known-hosts file".into()),
            });
        }
        Ok(())
    }

    /// Runs one `sh -s` session fed with `program`, streaming its standard output and error
    /// into the captures. When `deadline` passes, the local client is killed (the remote
    /// supervisor is what ends the command; this only stops waiting).
    pub async fn session(
        &self,
        program: &str,
        out: &mut Capture,
        err: &mut Capture,
        deadline: Option<Duration>,
    ) -> Result<SessionEnd> {
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.options)
            .args(["-o", "ControlMaster=no", "-T", "--"])
            .arg(&self.destination)
            .arg("exec sh -s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ExecError::Unavailable {
                backend: BackendKind::Ssh,
                reason: format!("cannot run {}: {e}", self.program.display()),
                hint: Some("install openssh-client".into()),
            })?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let feed = async {
            // A session that dies early closes its stdin; the exit status tells the rest.
            let _ = stdin.write_all(program.as_bytes()).await;
            drop(stdin);
        };
        let work = async {
            let (_, a, b, status) =
                tokio::join!(feed, drain(stdout, out), drain(stderr, err), child.wait());
            a?;
            b?;
            status.map_err(|e| ExecError::io("waiting for ssh", e))
        };
        let status = match deadline {
            None => Some(work.await?),
            Some(d) => match tokio::time::timeout(d, work).await {
                Ok(r) => Some(r?),
                Err(_) => None,
            },
        };
        Ok(SessionEnd {
            code: status.and_then(|s| s.code()),
        })
    }

    /// Runs a short session and collects its output whole (the job verbs).
    pub async fn collect(
        &self,
        program: &str,
        spill_dir: &Path,
    ) -> Result<(Option<i32>, Vec<u8>, Vec<u8>)> {
        let limits = crate::output::OutputLimits {
            head_bytes: 64 << 20,
            tail_bytes: 0,
            ..Default::default()
        };
        let mut out = Capture::new(&limits, spill_dir, "ssh-call");
        let mut err = Capture::new(&limits, spill_dir, "ssh-call");
        let end = self.session(program, &mut out, &mut err, None).await?;
        Ok((end.code, out.finish().head, err.finish().head))
    }

    /// The size of ssh's log: it grows when ssh itself reports a failure, which is how an
    /// exit status of 255 from ssh is told apart from a command that exited 255.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// ssh's last words, for errors after an exit status of 255.
    pub fn last_error(&self) -> String {
        self.log_tail()
    }

    /// Closes the master connection (`ssh -O exit`). Other processes sharing it lose it too,
    /// which is why [`close`](crate::Backend::close) does not call this.
    pub fn exit_master(&self) {
        let _ = std::process::Command::new(&self.program)
            .args(&self.options)
            .args(["-O", "exit", "--"])
            .arg(&self.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn drain(mut from: impl AsyncRead + Unpin, into: &mut Capture) -> Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| ExecError::io("reading ssh's output", e))?;
        if n == 0 {
            return Ok(());
        }
        into.push(&buf[..n])?;
    }
}
