//! nestbox exec layer: one interface to run an agent's commands on a backend. This crate will
//! hold the `Backend` trait and the backends (local caged, Docker/Podman, SSH, ...); they are
//! added separately.
//!
//! Every command goes through the [`guard`] first. The guard classifies the *parsed* command,
//! not its text. Regular expressions over shell text fail both ways, and Hermes Agent's history
//! of both kinds of bug shows it: they miss what quoting, escapes, wrappers and payloads hide
//! (`r''m -rf /`, `\rm`, `nice reboot`, `/usr/bin/sudo`, `bash -c "sh -c '...'"`, an escaped
//! quote that hides a following command), and they fire on words that are only data
//! (`grep "rm -rf /" notes.txt`, `git commit -m "git clean -f"`). A shell grammar decides what
//! is a command, what is an argument and what is a string; the guard then judges commands with
//! their wrappers peeled off and their nested code parsed again, and what it cannot know
//! (a variable, a download) it says it cannot know.

pub mod guard;
