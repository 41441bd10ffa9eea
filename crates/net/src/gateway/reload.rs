//! Reloading the policy: on `SIGHUP`, and when the policy file (or a secret file, or an extra
//! root bundle) changes, checked by polling its identity (inode, size, modification time) so
//! that editors that write aside and rename are seen too. A valid policy becomes the generation
//! for new connections; an invalid one is refused with its full error in the log and in the
//! status, and the last valid one stays.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::generation::Generation;
use super::{GatewayError, Shared, process_env, say};
use crate::audit::rfc3339;

/// What identifies a version of a file: reloading is decided by a change of any of these.
pub(super) type Stamp = Vec<(PathBuf, Option<(u64, u64, i64, i64)>)>;

pub(super) fn stamp(paths: &[PathBuf]) -> Stamp {
    paths
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p)
                .ok()
                .map(|m| (m.ino(), m.len(), m.mtime(), m.mtime_nsec()));
            (p.clone(), m)
        })
        .collect()
}

/// The files a generation depends on: the policy, secret files, extra root bundles.
fn watched(policy: &Path, g: &Generation) -> Vec<PathBuf> {
    let mut out = vec![policy.to_path_buf()];
    for c in &g.policy.credentials {
        if let nestbox_policy::gateway::SecretSource::File(p) = &c.source {
            out.push(p.clone());
        }
    }
    out.extend(g.policy.settings.upstream_ca.iter().cloned());
    out
}

/// Reloads on `SIGHUP` and whenever a watched file changes.
pub(super) async fn watch(
    shared: Arc<Shared>,
    poll: Duration,
    policy: Stamp,
) -> Result<(), GatewayError> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| GatewayError::Setup(format!("SIGHUP handler: {e}")))?;
    let mut seen = stamp(&watched(&shared.policy_path, &shared.current()));
    if let (Some(first), Some(before)) = (seen.first_mut(), policy.into_iter().next()) {
        *first = before;
    }
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = hup.recv() => {
                reload(shared.clone(), "SIGHUP").await;
            }
            _ = tick.tick() => {
                let paths: Vec<PathBuf> = seen.iter().map(|(p, _)| p.clone()).collect();
                let now = stamp(&paths);
                if now != seen {
                    reload(shared.clone(), "a watched file changed").await;
                }
            }
        }
        // watch what the generation now in force depends on (or still the old files)
        seen = stamp(&watched(&shared.policy_path, &shared.current()));
    }
}

/// Loads the policy again. A valid one becomes the generation for new connections; an invalid
/// one is refused, with the full error logged and kept for `status`, and the last valid policy
/// stays in force.
pub(crate) async fn reload(shared: Arc<Shared>, why: &'static str) {
    let next = shared.current().number + 1;
    let path = shared.policy_path.clone();
    let loaded = tokio::task::spawn_blocking(move || Generation::load(&path, next, &process_env))
        .await
        .unwrap_or_else(|e| Err(format!("the reload task failed: {e}")));
    let now = rfc3339(SystemTime::now());
    match loaded {
        Ok(g) => {
            say(&format!(
                "policy reloaded ({why}): generation {} ({} rules, {} credentials) applies to new connections",
                g.number,
                g.policy.rules.len(),
                g.policy.credentials.len()
            ));
            for w in &g.policy.warnings {
                say(&format!("warning: {w}"));
            }
            if let Ok(mut slot) = shared.generation.write() {
                *slot = Arc::new(g);
            }
            if let Ok(mut r) = shared.reload.lock() {
                r.last_ok = Some(now);
                r.last_error = None;
            }
        }
        Err(e) => {
            let keep = shared.current().number;
            say(&format!(
                "refused the new policy ({why}); generation {keep} stays in force:\n{e}"
            ));
            if let Ok(mut r) = shared.reload.lock() {
                r.last_error = Some((now, e));
                r.refused += 1;
            }
        }
    }
}
