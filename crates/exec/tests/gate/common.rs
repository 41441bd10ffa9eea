//! Helpers for the gate tests.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nestbox_exec::approval::{Answer, ApprovalRequest};
use nestbox_exec::{
    Approver, BackendKind, BoxFuture, Cancellation, Descriptor, ExposedPath, ExposureSource, Hook,
    HostExposure, Isolation, ToolCall,
};

/// A descriptor like the local cage's: the working directory is the host's.
pub fn cage(workdir: &Path) -> Descriptor {
    Descriptor {
        kind: BackendKind::Local,
        isolation: Isolation::Cage,
        host_exposure: HostExposure {
            exposed: true,
            paths: vec![ExposedPath {
                host: workdir.display().to_string(),
                target: workdir.display().to_string(),
                read_only: false,
                via: ExposureSource::CagePolicy,
            }],
            notes: vec![],
        },
        streams_output: true,
        cancellation: Cancellation::CageSupervisor,
        target: "cage".into(),
    }
}

/// A descriptor like a Docker container's with no host path at all.
pub fn sealed_container() -> Descriptor {
    Descriptor {
        kind: BackendKind::Docker,
        isolation: Isolation::Container,
        host_exposure: HostExposure::default(),
        streams_output: true,
        cancellation: Cancellation::SandboxSupervisor,
        target: "container".into(),
    }
}

/// A `run` call of shell text.
pub fn run(command: &str) -> ToolCall {
    ToolCall {
        tool: "run".into(),
        command: Some(command.into()),
        argv: Some(vec!["sh".into(), "-c".into(), command.into()]),
        ..ToolCall::default()
    }
}

/// Writes an executable script and returns a hook for it with a short timeout.
pub fn hook_script(dir: &Path, name: &str, body: &str) -> Hook {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    Hook {
        program: path,
        timeout: Duration::from_secs(5),
    }
}

/// An approver that gives queued answers and records what it was asked.
#[derive(Default)]
pub struct Scripted {
    pub answers: Mutex<Vec<Answer>>,
    pub asked: Mutex<Vec<ApprovalRequest>>,
}

impl Scripted {
    pub fn new(answers: Vec<Answer>) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(answers),
            asked: Mutex::new(Vec::new()),
        })
    }

    pub fn times_asked(&self) -> usize {
        self.asked.lock().unwrap().len()
    }
}

impl Approver for Scripted {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Answer> {
        self.asked.lock().unwrap().push(request.clone());
        let mut answers = self.answers.lock().unwrap();
        let a = if answers.is_empty() {
            Answer::Unavailable("the script ran out of answers".into())
        } else {
            answers.remove(0)
        };
        Box::pin(async move { a })
    }
}

/// A scratch directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A path inside `dir`.
pub fn file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}
