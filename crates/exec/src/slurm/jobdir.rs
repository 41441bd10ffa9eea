//! A job's directory on the shared filesystem, seen from the submitting side: created here
//! (mode 700) before the job is submitted, written by the job script on the compute node,
//! read here by offset. The layout is the [supervisor](crate::supervisor)'s (`out`, `err`,
//! `status`, `started`, `finished`, `timedout`, `killed`, `notfound`, `pgid`) plus:
//!
//! | file | written by | content |
//! |---|---|---|
//! | `env` | this side, before submitting | forwarded variables; deleted by the job at start |
//! | `slurm-job` | the job script | the Slurm job id |
//! | `script.out`, `script.err` | Slurm (`sbatch` jobs) | the job script's own output (refusals) |

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::backend::{BackendKind, Stream};
use crate::error::{ExecError, Result};

/// What the job's files say right now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Files {
    /// The recorded exit code (128+N for signal N), once the job has ended.
    pub status: Option<i32>,
    pub timed_out: bool,
    pub killed: bool,
    pub not_found: bool,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub started: Option<u64>,
    pub finished: Option<u64>,
}

/// One job's directory.
#[derive(Debug, Clone)]
pub(crate) struct JobDir {
    path: PathBuf,
}

fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

impl JobDir {
    /// The directory of job `token` under `base` (not created).
    pub fn at(base: &Path, token: &str) -> JobDir {
        JobDir {
            path: base.join(token),
        }
    }

    /// Creates the directory (and `base`, mode 700, when missing).
    pub fn create(base: &Path, token: &str) -> Result<JobDir> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(base)
            .map_err(|e| {
                ExecError::io(format!("creating the jobs directory {}", base.display()), e)
            })?;
        let dir = JobDir::at(base, token);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir.path)
            .map_err(|e| ExecError::io(format!("creating {}", dir.path.display()), e))?;
        Ok(dir)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the directory exists.
    pub fn exists(&self) -> bool {
        self.path.is_dir()
    }

    /// Writes the forwarded variables (mode 600) for the job script to read and delete.
    pub fn write_env(&self, text: &str) -> Result<()> {
        crate::host::write_private(&self.path.join("env"), text.as_bytes())
    }

    /// Marks the job as killed on request (before `scancel`).
    pub fn mark_killed(&self) {
        let _ = std::fs::write(self.path.join("killed"), b"");
    }

    /// What the files say.
    pub fn files(&self) -> Files {
        let p = |name: &str| self.path.join(name);
        let number = |name: &str| first_line(&p(name)).and_then(|l| l.parse::<u64>().ok());
        Files {
            status: first_line(&p("status")).and_then(|l| l.parse().ok()),
            timed_out: p("timedout").exists(),
            killed: p("killed").exists(),
            not_found: p("notfound").exists(),
            stdout_bytes: size(&p("out")),
            stderr_bytes: size(&p("err")),
            started: number("started"),
            finished: number("finished"),
        }
    }

    /// Up to `max` bytes of `stream` from `offset`.
    pub fn read(&self, stream: Stream, offset: u64, max: usize) -> Result<Vec<u8>> {
        let path = self.path.join(stream.file_name());
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ExecError::io(format!("opening {}", path.display()), e)),
        };
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| ExecError::io(format!("seeking in {}", path.display()), e))?;
        let mut data = Vec::new();
        file.take(max as u64)
            .read_to_end(&mut data)
            .map_err(|e| ExecError::io(format!("reading {}", path.display()), e))?;
        Ok(data)
    }

    /// The job script's refusal (`nestbox: ...`), from `script.err` or the given text.
    pub fn refusal(&self, extra: Option<&str>) -> Option<String> {
        let file = std::fs::read_to_string(self.path.join("script.err")).unwrap_or_default();
        [extra.unwrap_or_default(), file.as_str()]
            .iter()
            .flat_map(|t| t.lines())
            .filter_map(|l| l.strip_prefix("nestbox: "))
            .next_back()
            .map(str::to_string)
    }

    /// Deletes the directory.
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ExecError::io(
                format!("removing {}", self.path.display()),
                e,
            )),
        }
    }

    /// The error for a job whose directory is gone.
    pub fn missing(&self, id: &str) -> ExecError {
        ExecError::NoSuchJob {
            backend: BackendKind::Slurm,
            id: id.to_string(),
            detail: Some(format!("no job directory {}", self.path.display())),
        }
    }
}
