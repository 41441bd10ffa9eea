//! Output capture that stays bounded while it reads: the first bytes and the last bytes of a
//! stream are kept in memory, and once a stream outgrows that, the *whole* stream goes to a
//! spill file whose path the result carries. A command that prints gigabytes costs a fixed
//! amount of memory, and nothing it printed is lost (up to the spill cap, which the result
//! reports when it is hit).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize, Serializer};

use crate::error::{ExecError, Result};

/// How much output to keep in memory, and where and how much to spill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputLimits {
    /// Bytes kept from the start of each stream.
    pub head_bytes: usize,
    /// Bytes kept from the end of each stream.
    pub tail_bytes: usize,
    /// Directory for spill files. Default: `<state dir>/output`.
    pub spill_dir: Option<PathBuf>,
    /// Largest spill file; what comes after is counted but not written, and the result says so.
    pub spill_max_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            head_bytes: 16 * 1024,
            tail_bytes: 48 * 1024,
            spill_dir: None,
            spill_max_bytes: 4 << 30,
        }
    }
}

/// Spill files older than this are deleted when a new one is made.
const SPILL_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// One captured stream: all of it when it was small, else its head and tail and the path of
/// the file holding the whole stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CapturedOutput {
    /// The first bytes (all of them when `truncated` is false).
    #[serde(serialize_with = "serialize_lossy")]
    pub head: Vec<u8>,
    /// The last bytes, when the stream was larger than head and tail together.
    #[serde(serialize_with = "serialize_lossy")]
    pub tail: Vec<u8>,
    /// Bytes the stream had in all.
    pub total_bytes: u64,
    /// True when bytes between `head` and `tail` are not in memory.
    pub truncated: bool,
    /// The file holding the whole stream, when it was truncated.
    pub full_output: Option<PathBuf>,
    /// False when even the spill file hit its cap: it then holds the first `spill_max_bytes`.
    pub full_output_complete: bool,
}

impl CapturedOutput {
    /// The end of the stream as held in memory: where the supervisor's and the cage's last
    /// words (timeout notice, refusal, command not found) are.
    pub(crate) fn last_bytes(&self) -> &[u8] {
        if self.truncated {
            &self.tail
        } else {
            &self.head
        }
    }

    /// The captured bytes as text (invalid UTF-8 replaced), with a line in the middle saying
    /// how much was left out and where the whole stream is.
    pub fn text(&self) -> String {
        if !self.truncated {
            return String::from_utf8_lossy(&self.head).into_owned();
        }
        let omitted = self.total_bytes - (self.head.len() + self.tail.len()) as u64;
        let place = match &self.full_output {
            Some(p) if self.full_output_complete => format!("full output in {}", p.display()),
            Some(p) => format!(
                "first part of the output in {} (spill cap hit)",
                p.display()
            ),
            None => "full output not kept".into(),
        };
        format!(
            "{}\n[... {omitted} bytes omitted; {place} ...]\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&self.tail)
        )
    }

    /// All the bytes, when the stream was small enough to keep whole.
    pub fn complete_bytes(&self) -> Option<&[u8]> {
        (!self.truncated).then_some(&self.head[..])
    }
}

/// Serializes bytes as a string, replacing invalid UTF-8 (for JSON output).
pub(crate) fn serialize_lossy<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(bytes))
}

/// Collects one stream as it arrives; see the module documentation.
pub struct Capture {
    limits: OutputLimits,
    spill_dir: PathBuf,
    label: String,
    /// Everything so far, until the stream outgrows head plus tail; then only the head.
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill: Option<Spill>,
}

struct Spill {
    file: File,
    path: PathBuf,
    written: u64,
    capped: bool,
}

impl Capture {
    /// A capture for one stream. `label` names the spill file (e.g. `docker-stdout`);
    /// `spill_dir` is used unless the limits name another.
    pub fn new(limits: &OutputLimits, spill_dir: &Path, label: &str) -> Capture {
        Capture {
            spill_dir: limits
                .spill_dir
                .clone()
                .unwrap_or_else(|| spill_dir.to_path_buf()),
            limits: limits.clone(),
            label: label.to_string(),
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spill: None,
        }
    }

    /// Bytes seen so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Takes the next piece of the stream.
    pub fn push(&mut self, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.total += data.len() as u64;
        if self.spill.is_none() {
            let keep = self.limits.head_bytes + self.limits.tail_bytes;
            if self.head.len() + data.len() <= keep {
                self.head.extend_from_slice(data);
                return Ok(());
            }
            // The stream just outgrew memory: everything so far starts the spill file, then
            // memory keeps only the head and a rolling tail.
            let max = self.limits.spill_max_bytes;
            let mut spill = self.open_spill()?;
            spill.write(&self.head, max)?;
            spill.write(data, max)?;
            let mut all = std::mem::take(&mut self.head);
            all.extend_from_slice(data);
            let rest = all.split_off(self.limits.head_bytes.min(all.len()));
            self.head = all;
            self.push_tail(&rest);
            self.spill = Some(spill);
            return Ok(());
        }
        let max = self.limits.spill_max_bytes;
        if let Some(spill) = self.spill.as_mut() {
            spill.write(data, max)?;
        }
        self.push_tail(data);
        Ok(())
    }

    fn push_tail(&mut self, data: &[u8]) {
        let cap = self.limits.tail_bytes;
        if data.len() >= cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - cap..]);
            return;
        }
        self.tail.extend(data);
        let excess = self.tail.len().saturating_sub(cap);
        self.tail.drain(..excess);
    }

    fn open_spill(&self) -> Result<Spill> {
        std::fs::create_dir_all(&self.spill_dir).map_err(|e| {
            ExecError::io(
                format!("creating the spill directory {}", self.spill_dir.display()),
                e,
            )
        })?;
        prune_old_spills(&self.spill_dir);
        let path = self.spill_dir.join(format!(
            "{}-{}-{}.log",
            self.label,
            std::process::id(),
            crate::job::random_token(6)
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| ExecError::io(format!("creating {}", path.display()), e))?;
        Ok(Spill {
            file,
            path,
            written: 0,
            capped: false,
        })
    }

    /// Ends the stream and returns what was kept.
    pub fn finish(mut self) -> CapturedOutput {
        let truncated = self.spill.is_some();
        let (full_output, complete) = match self.spill.take() {
            Some(mut s) => {
                let _ = s.file.flush();
                (Some(s.path), !s.capped)
            }
            None => (None, true),
        };
        CapturedOutput {
            head: self.head,
            tail: self.tail.into_iter().collect(),
            total_bytes: self.total,
            truncated,
            full_output,
            full_output_complete: complete,
        }
    }
}

impl Spill {
    fn write(&mut self, data: &[u8], max: u64) -> Result<()> {
        let room = max.saturating_sub(self.written);
        let n = (data.len() as u64).min(room) as usize;
        if n < data.len() {
            self.capped = true;
        }
        if n > 0 {
            self.file
                .write_all(&data[..n])
                .map_err(|e| ExecError::io(format!("writing {}", self.path.display()), e))?;
            self.written += n as u64;
        }
        Ok(())
    }
}

fn prune_old_spills(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > SPILL_RETENTION);
        if old && entry.file_name().to_string_lossy().ends_with(".log") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(head: usize, tail: usize, max: u64) -> OutputLimits {
        OutputLimits {
            head_bytes: head,
            tail_bytes: tail,
            spill_dir: None,
            spill_max_bytes: max,
        }
    }

    #[test]
    fn small_streams_are_kept_whole_without_a_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Capture::new(&limits(4, 4, 100), dir.path(), "t");
        c.push(b"abc").unwrap();
        c.push(b"defgh").unwrap();
        let out = c.finish();
        assert_eq!(out.head, b"abcdefgh");
        assert!(!out.truncated && out.full_output.is_none());
        assert_eq!(out.text(), "abcdefgh");
    }

    #[test]
    fn large_streams_keep_head_and_tail_and_spill_everything() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Capture::new(&limits(4, 3, 1 << 20), dir.path(), "t");
        let data: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for piece in data.chunks(7) {
            c.push(piece).unwrap();
        }
        let out = c.finish();
        assert_eq!(out.head, &data[..4]);
        assert_eq!(out.tail, &data[997..]);
        assert_eq!(out.total_bytes, 1000);
        assert!(out.truncated && out.full_output_complete);
        let spilled = std::fs::read(out.full_output.as_ref().unwrap()).unwrap();
        assert_eq!(spilled, data);
        assert!(out.text().contains("993 bytes omitted"));
    }

    #[test]
    fn the_spill_cap_is_reported_not_silently_applied() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Capture::new(&limits(2, 2, 10), dir.path(), "t");
        c.push(&[b'x'; 50]).unwrap();
        let out = c.finish();
        assert_eq!(out.total_bytes, 50);
        assert!(!out.full_output_complete);
        assert_eq!(std::fs::read(out.full_output.unwrap()).unwrap().len(), 10);
    }

    proptest::proptest! {
        #[test]
        fn head_and_tail_always_match_the_stream(
            pieces in proptest::collection::vec(proptest::collection::vec(0u8..=255, 0..40), 0..30),
            head in 0usize..20, tail in 1usize..20,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut c = Capture::new(&limits(head, tail, 1 << 20), dir.path(), "p");
            let mut all = Vec::new();
            for p in &pieces { c.push(p).unwrap(); all.extend_from_slice(p); }
            let out = c.finish();
            proptest::prop_assert_eq!(out.total_bytes, all.len() as u64);
            if out.truncated {
                proptest::prop_assert_eq!(&out.head[..], &all[..head]);
                proptest::prop_assert_eq!(&out.tail[..], &all[all.len() - tail..]);
                proptest::prop_assert_eq!(std::fs::read(out.full_output.unwrap()).unwrap(), all);
            } else {
                proptest::prop_assert_eq!(out.head, all);
            }
        }
    }
}
