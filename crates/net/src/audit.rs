//! The audit log: one JSON line per relay decision, appended to a file.
//!
//! A line is written when the connection it describes ends (so it can carry the byte counts and
//! the duration), or when the relay shuts down with the connection still open. Each line goes
//! out in a single `write(2)` on a file opened with `O_APPEND`, so lines from several relays
//! sharing one file do not interleave.
//!
//! ```json
//! {"time":"2026-11-29T14:36:02.117Z","step":"s1","method":"CONNECT","host":"pypi.org",
//!  "port":443,"addr":"203.0.113.80:443","decision":"allow","rule":"`pypi` (...)",
//!  "reason":null,"detail":null,"status":200,"bytes_up":517,"bytes_down":5120,"duration_ms":41}
//! ```
//! (one line in the file; wrapped here).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// What the relay decided about one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Let through (a tunnel or a forwarded request).
    Allow,
    /// Refused: by the policy, or because the request was malformed or too slow.
    Deny,
    /// Allowed by the policy but could not be completed (DNS, connect, upstream).
    Error,
}

/// One line of the audit log.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// When the connection ended (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// The step id given to the relay, if any.
    pub step: Option<String>,
    /// The request method (`CONNECT`, `GET`, ...), if a request line was read.
    pub method: Option<String>,
    /// The target host as requested.
    pub host: Option<String>,
    /// The target port.
    pub port: Option<u16>,
    /// The address dialed: the target's resolved address, or the upstream proxy's.
    pub addr: Option<String>,
    /// The decision.
    pub decision: Decision,
    /// The rule that allowed or denied, when one did.
    pub rule: Option<String>,
    /// The refusal reason (the `X-Nestbox-Denied` value), when refused or failed.
    pub reason: Option<String>,
    /// More words about the reason.
    pub detail: Option<String>,
    /// The HTTP status the relay answered with (200 for an established tunnel).
    pub status: Option<u16>,
    /// Bytes sent towards the destination: a tunnel's bytes after the `CONNECT` head, or the
    /// request head a fetch forwarded.
    pub bytes_up: u64,
    /// Bytes from the destination to the client.
    pub bytes_down: u64,
    /// From accepting the connection to its end.
    pub duration_ms: u64,
}

/// An open audit log file.
#[derive(Debug)]
pub struct AuditLog {
    file: File,
}

impl AuditLog {
    /// Opens (creating, mode 0600) `path` for appending.
    ///
    /// The path may lie in the step's repository, so a symlink planted there (to `~/.bashrc`,
    /// say) or a FIFO is refused rather than followed.
    pub fn open(path: &Path) -> io::Result<AuditLog> {
        let file = nestbox_cage::outfile::open_output(path, nestbox_cage::outfile::Mode::Append)?;
        Ok(AuditLog { file })
    }

    /// Appends one record as a JSON line. Errors are returned, not hidden; the relay reports them
    /// once on stderr and carries on (a full disk must not cut the step's network).
    pub fn write(&self, record: &Record) -> io::Result<()> {
        self.write_json(record)
    }

    /// Appends any serializable record as one JSON line (the gateway's records).
    pub fn write_json(&self, record: &impl Serialize) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        (&self.file).write_all(&line)
    }
}

/// Formats a time as RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T14:36:02.117Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_formats_known_instants() {
        let at = |s: u64, ms: u64| rfc3339(UNIX_EPOCH + Duration::from_millis(s * 1000 + ms));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_709_251_199, 999), "2024-02-29T23:59:59.999Z");
        assert_eq!(at(4_102_444_800, 0), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn records_are_single_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let rec = Record {
            time: rfc3339(SystemTime::now()),
            step: Some("s\n1".into()),
            method: Some("CONNECT".into()),
            host: Some("pypi.org".into()),
            port: Some(443),
            addr: None,
            decision: Decision::Deny,
            rule: None,
            reason: Some("host_not_allowed".into()),
            detail: None,
            status: Some(403),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 1,
        };
        log.write(&rec).unwrap();
        log.write(&rec).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["step"], "s\n1");
    }
}
