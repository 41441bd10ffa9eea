//! The errors of the exec layer. Each says what was refused or what failed, on which backend,
//! and what the caller can do about it. None of them carries an environment value.

use std::io;

use crate::backend::BackendKind;

/// Everything that can go wrong between a configuration and a finished command.
///
/// A command that ran and exited non-zero is *not* an error: it is a
/// [`RunResult`](crate::RunResult) with its exit code. These are the cases where the command
/// could not be run as asked, or its job cannot be found or reached.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The configuration names a backend that does not exist.
    #[error("unknown backend `{name}`: the backends are local, docker, ssh and apptainer")]
    UnknownBackend {
        /// The name as given.
        name: String,
    },

    /// The configuration is incomplete or contradictory (caught before anything ran).
    #[error("{backend} backend: invalid configuration: {reason}")]
    InvalidConfig {
        /// The backend the configuration is for.
        backend: BackendKind,
        /// What is wrong, and how to fix it.
        reason: String,
    },

    /// The request itself is malformed: an empty command, a bad environment name, a job id
    /// with characters a job id never has.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// The backend cannot be built on this machine right now: the engine's socket is missing,
    /// the SSH server does not answer, the Apptainer executable is not installed. Running
    /// refuses; nestbox never falls back to another backend.
    #[error("{backend} backend unavailable: {reason}{}", hint_suffix(.hint))]
    Unavailable {
        /// The backend that could not be built.
        backend: BackendKind,
        /// What failed.
        reason: String,
        /// How to make it available, when we know.
        hint: Option<String>,
    },

    /// The image the configuration names is not in the engine, and no registry is consulted.
    #[error(
        "{backend} backend: image `{image}` is not present in the engine at {engine}; nestbox never pulls: import or build it first (scripts/services/busybox-image.sh shows how without a registry)"
    )]
    ImageNotFound {
        /// The backend (docker or apptainer).
        backend: BackendKind,
        /// The image reference.
        image: String,
        /// Where we looked (socket path or cache directory).
        engine: String,
    },

    /// The program to run does not exist inside the sandbox (nothing was started).
    #[error("{backend} backend: command not found: `{program}`{}", detail_suffix(.detail))]
    CommandNotFound {
        /// The backend the command was meant to run on.
        backend: BackendKind,
        /// The program as given (the first word of the command).
        program: String,
        /// What the sandbox said, when it said more.
        detail: Option<String>,
    },

    /// The sandbox refused to run the command as configured (for the local backend: the cage
    /// refused, `nestbox run` exited 125; elsewhere: the job directory or working directory
    /// could not be set up).
    #[error("{backend} backend refused: {message}")]
    Refused {
        /// The backend that refused.
        backend: BackendKind,
        /// Its reason, as it gave it.
        message: String,
    },

    /// No job with this id exists where the backend keeps its jobs.
    #[error("{backend} backend: no job `{id}`{}", detail_suffix(.detail))]
    NoSuchJob {
        /// The backend asked.
        backend: BackendKind,
        /// The job id as given.
        id: String,
        /// Where it was looked for.
        detail: Option<String>,
    },

    /// The backend does not (yet) do what the configuration asks. Never silently ignored.
    #[error("{backend} backend: not supported: {what}")]
    Unsupported {
        /// The backend.
        backend: BackendKind,
        /// What is missing, and what to do instead.
        what: String,
    },

    /// The container engine answered with an error.
    #[error("{backend} backend: the engine failed to {action}: {message}")]
    Engine {
        /// The backend (docker).
        backend: BackendKind,
        /// What nestbox was doing.
        action: String,
        /// The engine's own message.
        message: String,
    },

    /// The connection to the sandbox broke and could not be re-established in time. The job,
    /// if one was started, may still be running: its id lets a later call re-attach.
    #[error("{backend} backend: connection lost while trying to {action}: {message}")]
    Connection {
        /// The backend.
        backend: BackendKind,
        /// What nestbox was doing.
        action: String,
        /// What the transport said.
        message: String,
    },

    /// The in-sandbox supervisor answered something nestbox does not understand.
    #[error(
        "{backend} backend: unexpected answer from the job supervisor while trying to {action}: {message}"
    )]
    Protocol {
        /// The backend.
        backend: BackendKind,
        /// What nestbox was doing.
        action: String,
        /// What came back.
        message: String,
    },

    /// A local I/O operation failed.
    #[error("{action}: {source}")]
    Io {
        /// What nestbox was doing.
        action: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

fn detail_suffix(detail: &Option<String>) -> String {
    detail
        .as_ref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default()
}

impl ExecError {
    /// Wraps an I/O error with what was being done.
    pub fn io(action: impl Into<String>, source: io::Error) -> Self {
        ExecError::Io {
            action: action.into(),
            source,
        }
    }

    /// The exit status `nestbox exec` reports for this error: 127 when the command was not
    /// found (the shell's convention), 125 for everything else (nestbox refused or failed).
    pub fn exit_code(&self) -> i32 {
        match self {
            ExecError::CommandNotFound { .. } => 127,
            _ => 125,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = ExecError> = std::result::Result<T, E>;
