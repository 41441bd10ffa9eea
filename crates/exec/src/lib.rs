//! # nestbox-exec
//!
//! One interface to run an agent's commands on a backend, and the guard that judges commands
//! before they run.
//!
//! An agent (a library caller, `nestbox exec`, later the MCP server) hands a [`CommandSpec`] to
//! a [`Backend`] and gets the same typed answer whatever the backend: a [`RunResult`] with the
//! exit code, standard output and standard error kept apart and bounded while they are read
//! (head and tail in memory, the whole stream in a spill file whose path the result carries),
//! timing, and whether the timeout ended it. Long commands run as background jobs that can be
//! polled, read from an offset, waited for and killed, by this process or a later one.
//!
//! | backend | where the command runs | how kill and timeout reach the tree |
//! |---|---|---|
//! | [`local`] | a caged step on this machine (`nestbox run`) | the launcher, a subreaper |
//! | [`docker`] | a hardened container (dockerd or Podman) | a supervisor inside the container |
//! | [`ssh`] | another machine, one multiplexed connection | a supervisor on that machine |
//! | [`apptainer`] | an Apptainer container on this machine | the container's PID namespace |
//!
//! ## The trait
//!
//! [`Backend`]: `prepare`, `run` (foreground, with a timeout), `spawn` (a background job),
//! `poll`, `read` (from an offset), `wait`, `kill`, `forget`, `close`. Each backend declares a
//! [`Descriptor`]: its isolation, the host paths it exposes (computed from its *final*
//! specification, e.g. the created container and the volumes behind its mounts), whether it
//! streams output, and how cancellation works. The environment is forwarded explicitly, by
//! name and value, and values never appear on a command line: not in the argument vector of a
//! launcher, a `docker`, an `ssh` or an `apptainer` process.
//!
//! ## Never fall back
//!
//! One [`ExecConfig`] names one backend, and [`open`] builds that backend or returns why it
//! cannot ([`ExecError::Unavailable`], [`ExecError::ImageNotFound`], ...). There is no default
//! backend to drop to and no "try docker, else local": a configuration that asked for a
//! container and silently got the host is how agents end up running a stranger's install
//! script next to their own credentials. Hermes Agent did exactly that at least five times
//! (`hermes serve`, `hermes -z`, re-created environments on other profiles...). Here the
//! decision is made once, in [`open`], and a failure there is final.
//!
//! ```no_run
//! use nestbox_exec::{BackendConfig, CommandSpec, DockerConfig, ExecConfig};
//!
//! let config = ExecConfig::new(BackendConfig::Docker(DockerConfig {
//!     image: "localhost/busybox".into(),
//!     ..DockerConfig::default()
//! }));
//! let result = nestbox_exec::block_on(async {
//!     let backend = nestbox_exec::open(&config).await?;
//!     let cmd = CommandSpec::new(["sh", "-c", "make test"])
//!         .timeout(std::time::Duration::from_secs(600));
//!     backend.run(&cmd).await
//! })?;
//! println!("exit {:?}: {}", result.exit_code, result.stdout.text());
//! # Ok::<(), nestbox_exec::ExecError>(())
//! ```
//!
//! ## The guard
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

pub mod apptainer;
pub mod backend;
pub mod config;
pub mod docker;
mod error;
pub mod guard;
mod host;
pub mod job;
pub mod local;
pub mod output;
pub mod ssh;
pub mod supervisor;

use std::path::PathBuf;

pub use backend::{
    Backend, BackendKind, BoxFuture, Cancellation, CommandSpec, Descriptor, ExposedPath,
    ExposureSource, HostExposure, Isolation, JobId, JobState, JobStatus, OutputChunk, RunResult,
    Stream,
};
pub use config::{
    ApptainerConfig, BackendConfig, DockerConfig, ExecConfig, HostKeyPolicy, LocalConfig,
    SshConfig, open,
};
pub use error::{ExecError, Result};
pub use output::{CapturedOutput, OutputLimits};

/// What every backend gets besides its own configuration.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub output: OutputLimits,
    pub state_dir: PathBuf,
}

impl Context {
    /// Where spill files go unless the output limits name a directory.
    pub fn spill_dir(&self) -> PathBuf {
        self.state_dir.join("output")
    }
}

/// Runs a future to completion on a fresh single-threaded runtime, for synchronous callers
/// such as the command line. Do not call it from inside another runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
        .block_on(future)
}
