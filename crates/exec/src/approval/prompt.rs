//! The terminal prompt: asks a person on `/dev/tty` (or a terminal named on the command line),
//! never on standard input or output, which may be an MCP client's pipes.
//!
//! ```text
//! nestbox: approval needed (step 4b1c-3, run on local: cage on this machine)
//!   command: git push --force origin feature
//!   - git.force_push: force-pushes, overwriting the remote's history
//!       in: git push --force origin feature
//! Allow? [o]nce [s]ession [a]lways [d]eny (no default; deny in 120 s):
//! ```
//!
//! Safety details: input typed before the prompt appeared is discarded (type-ahead must not
//! answer a question nobody has read yet); Enter alone, or any other answer, asks again; the
//! timeout is a deny; control characters in the command are shown escaped, so a command
//! cannot repaint the prompt with terminal escape sequences.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Answer, ApprovalRequest, Approver, Choice};
use crate::backend::BoxFuture;

/// Asks a person at a terminal.
#[derive(Debug, Clone)]
pub struct TerminalPrompt {
    /// The terminal device. Default: `/dev/tty`, the controlling terminal.
    pub device: PathBuf,
    /// How long to wait for an answer before denying.
    pub timeout: Duration,
}

impl Default for TerminalPrompt {
    fn default() -> Self {
        TerminalPrompt {
            device: PathBuf::from("/dev/tty"),
            timeout: Duration::from_secs(120),
        }
    }
}

impl Approver for TerminalPrompt {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Answer> {
        let device = self.device.clone();
        let timeout = self.timeout;
        let request = request.clone();
        Box::pin(async move {
            let asked = tokio::task::spawn_blocking(move || {
                let mut tty = match OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
                    .open(&device)
                {
                    Ok(t) => t,
                    Err(e) => {
                        return Answer::Unavailable(format!(
                            "no terminal to ask on ({}: {e})",
                            device.display()
                        ));
                    }
                };
                // SAFETY: tcflush on a descriptor we own; fails harmlessly on a non-terminal.
                unsafe { libc::tcflush(tty.as_raw_fd(), libc::TCIFLUSH) };
                converse(&mut tty, &request, timeout)
            })
            .await;
            asked.unwrap_or_else(|e| Answer::Unavailable(format!("the prompt failed: {e}")))
        })
    }
}

/// Shows `request` on `io` and reads answers until one is valid, the input ends, or `timeout`
/// passes. Public so that other front ends (and tests) can drive the same dialogue over any
/// pollable stream.
pub fn converse<S: Read + Write + AsFd>(
    io: &mut S,
    request: &ApprovalRequest,
    timeout: Duration,
) -> Answer {
    let deadline = Instant::now() + timeout;
    let choices = if request.can_remember {
        "[o]nce [s]ession [a]lways [d]eny"
    } else {
        "[o]nce [d]eny"
    };
    let mut text = render(request);
    text.push_str(&format!(
        "Allow? {choices} (no default; deny in {} s): ",
        timeout.as_secs()
    ));
    if io
        .write_all(text.as_bytes())
        .and_then(|_| io.flush())
        .is_err()
    {
        return Answer::Unavailable("cannot write to the terminal".into());
    }
    let mut pending = Vec::new();
    loop {
        let line = match read_line(io, &mut pending, deadline) {
            Ok(Some(line)) => line,
            Ok(None) => {
                let _ = io.write_all(b"\nnestbox: no answer in time: denied\n");
                return Answer::TimedOut;
            }
            Err(why) => return Answer::Unavailable(why),
        };
        let choice = match line.trim().to_ascii_lowercase().as_str() {
            "o" | "once" => Some(Choice::Once),
            "s" | "session" if request.can_remember => Some(Choice::Session),
            "a" | "always" if request.can_remember => Some(Choice::Always),
            "d" | "deny" | "n" | "no" => Some(Choice::Deny),
            _ => None,
        };
        if let Some(c) = choice {
            return Answer::Chose(c);
        }
        let again = format!("Please type one of {choices}: ");
        if io
            .write_all(again.as_bytes())
            .and_then(|_| io.flush())
            .is_err()
        {
            return Answer::Unavailable("cannot write to the terminal".into());
        }
    }
}

/// Reads one line (keeping what follows it in `pending`), or `Ok(None)` when the deadline
/// passes first.
fn read_line<S: Read + AsFd>(
    io: &mut S,
    pending: &mut Vec<u8>,
    deadline: Instant,
) -> Result<Option<String>, String> {
    let mut byte = [0u8; 256];
    loop {
        if let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&pending[..end]).into_owned();
            pending.drain(..=end);
            return Ok(Some(line));
        }
        if pending.len() > 4096 {
            pending.clear();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let mut pfd = libc::pollfd {
            fd: io.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms.max(1)) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("waiting for the terminal: {e}"));
        }
        if n == 0 {
            return Ok(None);
        }
        let got = match io.read(&mut byte) {
            Ok(0) => return Err("the terminal closed before an answer".into()),
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the terminal: {e}")),
        };
        pending.extend_from_slice(&byte[..got]);
    }
}

/// The request as the person reads it.
fn render(r: &ApprovalRequest) -> String {
    let mut s = format!(
        "\nnestbox: approval needed (step {}, {} on {})\n  {}: {}\n",
        r.step_id,
        r.tool,
        printable(&r.backend),
        if r.tool == "process" {
            "operation"
        } else {
            "command"
        },
        printable(&r.summary)
    );
    for item in &r.items {
        s.push_str(&format!(
            "  - {}: {}\n",
            printable(&item.source),
            printable(&item.reason)
        ));
        if !item.matched.is_empty() && item.matched != r.summary {
            s.push_str(&format!("      in: {}\n", printable(&item.matched)));
        }
    }
    s
}

/// Escapes control characters (and the DEL and C1 ranges) so text cannot move the cursor,
/// clear the screen or fake a line of the prompt.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::PendingItem;
    use std::os::unix::net::UnixStream;

    fn request(can_remember: bool) -> ApprovalRequest {
        ApprovalRequest {
            step_id: "s-1".into(),
            tool: "run".into(),
            summary: "git push --force origin feature".into(),
            backend: "local: cage".into(),
            items: vec![PendingItem {
                source: "git.force_push".into(),
                reason: "force-pushes".into(),
                matched: "git push --force origin feature".into(),
            }],
            can_remember,
        }
    }

    /// Runs the dialogue against `typed` (written by a "person" on the other end) and returns
    /// the answer and everything the prompt wrote.
    fn dialogue(typed: &'static [u8], can_remember: bool, timeout: Duration) -> (Answer, String) {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let person = std::thread::spawn(move || {
            theirs.write_all(typed).unwrap();
            theirs
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // Keep the connection open until the prompt is done, reading what it shows.
            while let Ok(n) = theirs.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&seen).into_owned()
        });
        let answer = converse(&mut ours, &request(can_remember), timeout);
        drop(ours);
        (answer, person.join().unwrap())
    }

    #[test]
    fn each_choice_is_read_by_letter_or_word() {
        let t = Duration::from_secs(5);
        assert_eq!(dialogue(b"o\n", true, t).0, Answer::Chose(Choice::Once));
        assert_eq!(
            dialogue(b"session\n", true, t).0,
            Answer::Chose(Choice::Session)
        );
        assert_eq!(dialogue(b"A\n", true, t).0, Answer::Chose(Choice::Always));
        assert_eq!(dialogue(b"d\n", true, t).0, Answer::Chose(Choice::Deny));
    }

    #[test]
    fn enter_alone_is_not_an_answer_and_asks_again() {
        let (answer, shown) = dialogue(b"\n\nd\n", true, Duration::from_secs(5));
        assert_eq!(answer, Answer::Chose(Choice::Deny));
        assert_eq!(shown.matches("Please type one of").count(), 2, "{shown}");
    }

    #[test]
    fn silence_until_the_timeout_is_a_deny() {
        let (answer, shown) = dialogue(b"", true, Duration::from_millis(300));
        assert_eq!(answer, Answer::TimedOut);
        assert!(shown.contains("denied"), "{shown}");
    }

    #[test]
    fn session_and_always_are_not_offered_when_nothing_can_be_remembered() {
        let (answer, shown) = dialogue(b"a\no\n", false, Duration::from_secs(5));
        assert_eq!(answer, Answer::Chose(Choice::Once));
        assert!(shown.contains("[o]nce [d]eny"), "{shown}");
        assert!(!shown.contains("[a]lways"), "{shown}");
    }

    #[test]
    fn the_prompt_shows_findings_and_escapes_control_characters() {
        let mut r = request(true);
        r.summary = "echo \x1b[2Jhidden".into();
        let text = render(&r);
        assert!(text.contains("git.force_push: force-pushes"));
        assert!(text.contains("echo \\x1b[2Jhidden"), "{text}");
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn a_missing_terminal_is_unavailable_not_approval() {
        let p = TerminalPrompt {
            device: PathBuf::from("/nonexistent/tty"),
            timeout: Duration::from_secs(1),
        };
        let answer = crate::block_on(p.ask(&request(true)));
        assert!(matches!(answer, Answer::Unavailable(_)), "{answer:?}");
    }
}
