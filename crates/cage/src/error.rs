//! Why a step could not be started. Each variant maps to the exit status `nestbox run` uses,
//! and each message says what was refused, why, and how to allow it.

/// A refusal or failure before the step's own program ran.
#[derive(Debug, thiserror::Error)]
pub enum CageError {
    /// The policy names something that cannot be granted (a missing path, a bad entry).
    #[error("{0}")]
    Policy(String),
    /// The kernel cannot enforce what the policy asks, and best effort was not requested.
    #[error("{0}")]
    Unsupported(String),
    /// The step's own PID, mount and network namespaces could not be created here (no user
    /// namespaces, an outer sandbox refusing them, a /proc that cannot be mounted). The caller
    /// may prepare the step again with `shared_namespaces`, and must say so.
    #[error("{0}")]
    NamespacesUnavailable(String),
    /// Something nestbox itself needs failed (temp dir, fork, a system call).
    #[error("{0}")]
    Setup(String),
    /// The command does not exist (exit 127, as a shell would say).
    #[error("{0}")]
    NotFound(String),
    /// The command exists but may not be executed under this policy (exit 126).
    #[error("{0}")]
    NotExecutable(String),
}

impl CageError {
    /// The exit status `nestbox run` reports for this error: 127 and 126 follow the shell's
    /// convention for "not found" and "cannot execute"; everything else is nestbox's own 125.
    pub fn exit_code(&self) -> i32 {
        match self {
            CageError::NotFound(_) => 127,
            CageError::NotExecutable(_) => 126,
            _ => 125,
        }
    }
}

pub(crate) fn setup(what: &str, err: impl std::fmt::Display) -> CageError {
    CageError::Setup(format!("{what}: {err}"))
}
