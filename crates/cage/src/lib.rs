//! # nestbox-cage
//!
//! The inner barrier around one worker step, built from kernel features and nothing else:
//! unprivileged, and nestable inside another sandbox.
//!
//! - [`landlock`]: what the step may read, write and execute; which TCP ports it may reach;
//!   no signals or abstract unix sockets outside its domain.
//! - [`seccomp`]: the calls Landlock cannot see (unix sockets, io_uring, namespaces, ptrace...).
//! - [`plan`] turns a policy into a [`PreparedStep`]; [`spawn`](PreparedStep::spawn) forks it
//!   with the pre-exec steps; [`RunningStep::wait`] supervises it (signals, timeout, leftovers).
//! - [`probe`] asks the kernel what it offers.
//!
//! **Fail closed.** When the kernel cannot enforce something the policy relies on, preparing
//! the step fails with [`CageError::Unsupported`], naming what is missing, unless the request
//! says `best_effort`; then the [`Report`] lists exactly what was dropped. There is no silent
//! fallback anywhere in this crate.
//!
//! ```no_run
//! use nestbox_cage::{PreparedStep, StepRequest};
//! use nestbox_policy::Policy;
//!
//! let req = StepRequest {
//!     policy: Policy::effective(None, Policy::default()),
//!     command: vec!["make".into(), "test".into()],
//!     caller_env: std::env::vars_os().collect(),
//!     ..StepRequest::default()
//! };
//! let step = PreparedStep::prepare(req)?.spawn(None)?;
//! let (outcome, report) = step.wait();
//! std::process::exit(outcome.status());
//! # Ok::<(), nestbox_cage::CageError>(())
//! ```
//!
//! This crate is synchronous on purpose: between fork and exec nothing may allocate or take a
//! lock, and a launcher with no threads makes that easy to keep true.

mod cgroup;
pub mod detach;
mod env;
mod error;
mod init;
pub mod landlock;
mod netns;
pub mod outfile;
pub mod plan;
pub mod probe;
pub mod report;
mod resolve;
pub mod seccomp;
mod spawn;
mod stepdir;
pub mod supervise;
mod sys;
pub mod tree;

pub use error::CageError;
pub use init::likely_available as namespaces_likely_available;
pub use plan::{Network, PreparedStep, StepRequest};
pub use report::Report;
pub use resolve::SkippedPath;
pub use spawn::{BeforeExec, Started};
pub use stepdir::new_step_id;
pub use supervise::{Outcome, RunningStep, TIMEOUT_STATUS};
pub use sys::{pidfd_open, pidfd_send_signal};
