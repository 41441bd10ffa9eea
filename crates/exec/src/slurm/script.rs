//! The job script: what runs on the compute node inside the Slurm job, for `srun` (foreground)
//! and `sbatch` (background) alike. It is the [supervisor](crate::supervisor)'s functions plus
//! a short entry point, `nb_slurm`, that:
//!
//! 1. records the Slurm job id in the job directory (`slurm-job`), so a foreground run learns
//!    it and a kill can name it;
//! 2. reads the forwarded variables from the job directory's `env` file (mode 600, written by
//!    the submitting side) and deletes it at once: values never travel on a command line, nor
//!    in the script Slurm stores;
//! 3. enters the working directory itself, and refuses (exit 125, naming the node) when it
//!    cannot: slurmstepd would silently run the job in `/tmp` instead;
//! 4. with the cage, refuses when `nestbox` is not installed on the node: never uncaged;
//! 5. on SIGTERM (what `scancel` and Slurm's time limit send first) kills the command's whole
//!    tree, process group and marked processes, so a tree that ignores SIGTERM or called
//!    `setsid` is gone even where Slurm's process tracking would miss it (proctrack/pgid or
//!    linuxproc);
//! 6. runs the command under `nb_supervise` (timeout to the second, output and status files)
//!    and, before the job ends, kills whatever still carries the job's marker.

use crate::supervisor::{SCRIPT, shell_quote};

/// The entry point, after the supervisor's functions.
const ENTRY: &str = r#"
nb_slurm() {
  nb_d=$1 nb_w=$2 nb_t=$3 nb_g=$4 nb_cage=$5; shift 5
  # srun --export=NONE gives an empty environment; the cage and `command -v` need a PATH.
  [ -n "${PATH:-}" ] || PATH=/usr/local/bin:/usr/bin:/bin
  export PATH
  echo "${SLURM_JOB_ID:-}" > "$nb_d/slurm-job"
  if [ -f "$nb_d/env" ]; then . "$nb_d/env"; rm -f "$nb_d/env"; fi
  nb_node=$(hostname 2>/dev/null || echo unknown)
  if [ -n "$nb_w" ]; then
    cd "$nb_w" 2>/dev/null || nb_die "cannot enter the working directory $nb_w on node $nb_node"
  fi
  if [ -n "$nb_cage" ] && ! command -v "$nb_cage" >/dev/null 2>&1; then
    nb_die "nestbox ($nb_cage) is not installed on node $nb_node, so the cage cannot apply there: install it on the compute nodes (or set launcher to its path); with cage = false the command runs uncaged"
  fi
  if ! command -v "$nb_prog" >/dev/null 2>&1; then
    : > "$nb_d/notfound"; echo 127 > "$nb_d/status"
    echo "nestbox: command not found: $nb_prog" >&2
    exit 127
  fi
  trap 'nb_kill_tree "$nb_d" "$nb_g"' TERM
  nb_stamp=1
  nb_supervise "$nb_d" "$nb_t" "$nb_g" files "$@"; nb_rc=$?
  if nb_marked_alive "$nb_d"; then nb_kill_tree "$nb_d" 1; fi
  exit "$nb_rc"
}
"#;

/// What one job runs.
pub(crate) struct JobScript<'a> {
    /// The job directory (absolute, on the shared filesystem).
    pub dir: &'a str,
    /// The working directory on the node.
    pub workdir: &'a str,
    /// The timeout in whole seconds, 0 for none.
    pub timeout_secs: u64,
    /// Seconds between SIGTERM and SIGKILL.
    pub grace_secs: u64,
    /// The launcher on the node when the cage applies.
    pub cage: Option<&'a str>,
    /// The user's program (checked on the node before anything starts).
    pub program: &'a str,
    /// What runs: the command, or the launcher around it.
    pub argv: &'a [String],
}

impl JobScript<'_> {
    /// The whole script, for `sbatch` (on its standard input) or `sh -c` (under `srun`).
    pub fn text(&self) -> String {
        let mut s = String::with_capacity(SCRIPT.len() + ENTRY.len() + 512);
        s.push_str("#!/bin/sh\n");
        s.push_str(SCRIPT);
        s.push_str(ENTRY);
        s.push_str(&format!("nb_prog={}\n", shell_quote(self.program)));
        s.push_str("nb_slurm");
        let head = [
            self.dir.to_string(),
            self.workdir.to_string(),
            self.timeout_secs.to_string(),
            self.grace_secs.to_string(),
            self.cage.unwrap_or_default().to_string(),
        ];
        for word in head.iter().chain(self.argv) {
            s.push(' ');
            s.push_str(&shell_quote(word));
        }
        s.push('\n');
        s
    }
}

/// The `env` file's content: one `export NAME='value'` line per variable.
pub(crate) fn env_file(env: &std::collections::BTreeMap<String, String>) -> String {
    env.iter()
        .map(|(k, v)| format!("export {k}={}\n", shell_quote(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_script_parses_in_dash() {
        let argv = vec!["sh".to_string(), "-c".into(), "echo 'a b'; exit 3".into()];
        let text = JobScript {
            dir: "/tmp/x",
            workdir: "/tmp",
            timeout_secs: 5,
            grace_secs: 2,
            cage: None,
            program: "sh",
            argv: &argv,
        }
        .text();
        let out = std::process::Command::new("/bin/sh")
            .args(["-n", "-c", &text])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.ends_with(
            "nb_slurm '/tmp/x' '/tmp' '5' '2' '' 'sh' '-c' 'echo '\\''a b'\\''; exit 3'\n"
        ));
    }

    #[test]
    fn env_values_are_quoted_for_the_shell() {
        let env = [("A".to_string(), "it's $x".to_string())]
            .into_iter()
            .collect();
        assert_eq!(env_file(&env), "export A='it'\\''s $x'\n");
    }
}
