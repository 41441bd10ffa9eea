//! `nestbox run`: one command as a caged step.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use nestbox_cage::outfile::{Mode, open_output};
use nestbox_cage::{CageError, Outcome, PreparedStep, Report, RunningStep, StepRequest};
use nestbox_net::cell::{CellNetwork, CellOptions, GatewayOptions, UpstreamChoice};
use nestbox_policy::{
    Access, NetEntry, NetMode, Origin, PathRule, Policy, check_env_name, load_file, units,
};

use crate::say_error;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  nestbox run -- pytest -q
  nestbox run --policy worker.toml --timeout 30m -- make test
  nestbox run --read ~/.cache/pip --env CI=1 --report - -- pip install -e .
  nestbox run --gateway http://127.0.0.1:3129 --credential ANTHROPIC_API_KEY -- python3 agent.py

Exit status: the step's own; 128+N if it died of signal N; 124 if it timed out;
126/127 if the command cannot be executed or found; 125 if nestbox refused or failed.")]
pub struct RunArgs {
    /// Policy file (TOML) added on top of the built-in default (unless it says base = "none").
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Allow reading PATH (repeatable; a leading `?` makes it optional).
    #[arg(long, value_name = "PATH")]
    read: Vec<String>,
    /// Allow reading and writing PATH (repeatable).
    #[arg(long, value_name = "PATH")]
    write: Vec<String>,
    /// Allow reading and executing beneath PATH (repeatable).
    #[arg(long, value_name = "PATH")]
    exec: Vec<String>,
    /// Pass NAME from this environment, or set NAME=VALUE (repeatable).
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Working directory of the step (writable by default; default: the current directory).
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Kill the whole step after this long (e.g. 90s, 30m, 1h30m).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Run even when the kernel cannot enforce everything; the report lists what was dropped.
    #[arg(long)]
    best_effort: bool,
    /// Write a JSON report of what was enforced and how the step ended (`-`: stderr).
    #[arg(long, value_name = "FILE")]
    report: Option<String>,
    /// Keep the step's private temp dir (HOME, TMPDIR) instead of removing it.
    #[arg(long)]
    keep_tmp: bool,
    /// Run the step as this user (name or UID[:GID]); nestbox must run as root.
    #[arg(long, value_name = "UID[:GID]")]
    user: Option<String>,
    /// Let the step reach HOST (`host`, `*.suffix`, an IP or CIDR; optional `:port`, default
    /// 443 for HTTPS and 80 for plain HTTP) through its relay (repeatable).
    #[arg(long, value_name = "HOST[:PORT]", help_heading = "Network")]
    allow: Vec<String>,
    /// Refuse HOST even when allowed (repeatable; without a port: every port).
    #[arg(long, value_name = "HOST[:PORT]", help_heading = "Network")]
    deny: Vec<String>,
    /// Allow a preset's hosts, e.g. pypi, npm, crates, debian, github (`nestbox presets`).
    #[arg(long, value_name = "NAME", help_heading = "Network")]
    preset: Vec<String>,
    /// How the relay is made the only exit: auto (netns when possible), netns, port.
    #[arg(long, value_name = "MODE", help_heading = "Network")]
    net_mode: Option<String>,
    /// A TCP port the step must never reach (outer proxy, gateway, agent API); repeatable.
    #[arg(long, value_name = "PORT", help_heading = "Network")]
    deny_port: Vec<u16>,
    /// Chain the relay through this proxy (`http://[user:pass@]host:port`). By default the
    /// relay chains through this environment's HTTPS_PROXY, if any.
    #[arg(
        long,
        value_name = "URL",
        help_heading = "Network",
        conflicts_with = "no_upstream"
    )]
    upstream: Option<String>,
    /// Never chain through an upstream proxy, even when HTTPS_PROXY is set here.
    #[arg(long, help_heading = "Network")]
    no_upstream: bool,
    /// Append one JSON line per relay decision to FILE.
    #[arg(long, value_name = "FILE", help_heading = "Network")]
    audit: Option<PathBuf>,
    /// Reach the network through this gateway (`http://127.0.0.1:3129`): the step's relay
    /// chains to it as a registered cell, and what the gateway policy grants the cell is
    /// allowed. The step trusts the gateway's CA (SSL_CERT_FILE and friends).
    #[arg(
        long,
        value_name = "URL",
        help_heading = "Gateway",
        conflicts_with_all = ["upstream", "no_upstream"]
    )]
    gateway: Option<String>,
    /// Give the step the placeholder `nestbox:resolve:env:NAME` in NAME; the gateway puts the
    /// real credential in where its policy binds it (repeatable).
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "Gateway",
        requires = "gateway"
    )]
    credential: Vec<String>,
    /// The cell's name, as the gateway policy names it (`cell = "..."`).
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "Gateway",
        default_value = "worker",
        requires = "gateway"
    )]
    cell_name: String,
    /// The gateway's state directory, where its control socket is (default: the gateway's
    /// default, $NESTBOX_GATEWAY_DIR or ~/.local/state/nestbox/gateway).
    #[arg(
        long,
        value_name = "DIR",
        help_heading = "Gateway",
        requires = "gateway"
    )]
    gateway_dir: Option<PathBuf>,

    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// The policy the flags describe, each entry marked with its flag.
fn flags_policy(args: &RunArgs) -> Result<Policy, String> {
    let mut p = Policy::default();
    for (list, access, flag) in [
        (&args.read, Access::Read, "--read"),
        (&args.write, Access::Write, "--write"),
        (&args.exec, Access::Exec, "--exec"),
    ] {
        for item in list {
            p.fs.push(
                PathRule::parse(item, access, Origin::Flag(flag))
                    .map_err(|m| format!("{flag} {item}: {m}"))?,
            );
        }
    }
    for item in &args.env {
        match item.split_once('=') {
            Some((name, value)) => {
                check_env_name(name).map_err(|m| format!("--env {item}: {m}"))?;
                p.env.set.insert(name.to_string(), value.to_string());
            }
            None => {
                check_env_name(item).map_err(|m| format!("--env {item}: {m}"))?;
                p.env.pass.push(item.clone());
            }
        }
    }
    p.net.allow = NetEntry::from_flag(&args.allow, "--allow");
    p.net.deny = NetEntry::from_flag(&args.deny, "--deny");
    p.net.presets = NetEntry::from_flag(&args.preset, "--preset");
    p.net.deny_ports = args.deny_port.clone();
    if let Some(mode) = &args.net_mode {
        p.net.mode = NetMode::parse(mode).map_err(|m| format!("--net-mode: {m}"))?;
    }
    if let Some(url) = &args.upstream {
        p.net.upstream = Some(NetEntry {
            text: url.clone(),
            origin: Origin::Flag("--upstream"),
        });
    }
    if let Some(t) = &args.timeout {
        p.limits.timeout = Some(units::parse_duration(t).map_err(|m| format!("--timeout: {m}"))?);
    }
    Ok(p)
}

/// The gateway options, checked against the policy: a credential's variable must not also be
/// passed or set (the step would hold the real value, or a different placeholder).
fn gateway_options(args: &RunArgs, policy: &Policy) -> Result<Option<GatewayOptions>, CageError> {
    let Some(url) = &args.gateway else {
        return Ok(None);
    };
    if let Some(up) = &policy.net.upstream {
        return Err(CageError::Policy(format!(
            "{}: the policy names an upstream proxy ({}), but --gateway makes the gateway the relay's upstream; remove one",
            up.origin, up.text
        )));
    }
    for name in &args.credential {
        check_env_name(name).map_err(|m| CageError::Policy(format!("--credential {name}: {m}")))?;
        if policy.env.pass.iter().any(|p| p == name) || policy.env.set.contains_key(name) {
            return Err(CageError::Policy(format!(
                "--credential {name}: {name} is also passed or set by --env or the policy; the step must hold only the placeholder"
            )));
        }
    }
    Ok(Some(GatewayOptions {
        url: url.clone(),
        dir: args
            .gateway_dir
            .clone()
            .unwrap_or_else(nestbox_net::gateway::default_state_dir),
        cell_name: args.cell_name.clone(),
        credentials: args.credential.clone(),
    }))
}

/// `name`, `uid` or `uid:gid` to numbers; a name or a bare uid takes the user's primary group.
fn parse_user(spec: &str) -> Result<(u32, u32), String> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let lookup = |name: &str| -> Option<(u32, u32)> {
        let c = std::ffi::CString::new(name).ok()?;
        // SAFETY: getpwnam returns a pointer into static storage or null; read it at once.
        let pw = unsafe { libc::getpwnam(c.as_ptr()) };
        (!pw.is_null()).then(|| unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
    };
    let (uid, primary) = match user.parse::<u32>() {
        Ok(uid) => {
            // SAFETY: getpwuid returns static storage or null; read it at once.
            let pw = unsafe { libc::getpwuid(uid) };
            let gid = if pw.is_null() {
                uid
            } else {
                unsafe { (*pw).pw_gid }
            };
            (uid, gid)
        }
        Err(_) => lookup(user).ok_or_else(|| format!("--user {spec}: no such user `{user}`"))?,
    };
    let gid = match group {
        Some(g) => g
            .parse::<u32>()
            .map_err(|_| format!("--user {spec}: the group must be numeric (GID)"))?,
        None => primary,
    };
    Ok((uid, gid))
}

/// Where the report goes: stderr, or a file opened before the step runs (so the step cannot
/// swap it for a symlink or a FIFO first; see `nestbox_cage::outfile`).
enum ReportTarget {
    Stderr,
    File(std::fs::File, String),
}

impl ReportTarget {
    fn open(target: &str) -> Result<ReportTarget, CageError> {
        if target == "-" {
            return Ok(ReportTarget::Stderr);
        }
        let file = open_output(std::path::Path::new(target), Mode::Truncate)
            .map_err(|e| CageError::Policy(format!("--report {target}: {e}")))?;
        Ok(ReportTarget::File(file, target.to_string()))
    }

    fn write(self, report: &Report) {
        let json = serde_json::to_string_pretty(report).expect("report serializes");
        match self {
            ReportTarget::Stderr => eprintln!("{json}"),
            ReportTarget::File(mut file, name) => {
                use std::io::Write;
                if let Err(e) = file.write_all((json + "\n").as_bytes()) {
                    say_error(format!("could not write the report to {name}: {e}"));
                }
            }
        }
    }
}

fn describe_end(outcome: &Outcome, timeout: Option<std::time::Duration>) {
    if outcome.timed_out {
        say_error(format!(
            "step timed out after {}: sent SIGTERM to its whole process tree, then SIGKILL to what was left after {}s",
            units::format_duration(timeout.unwrap_or_default()),
            nestbox_cage::supervise::KILL_GRACE.as_secs()
        ));
    }
}

pub fn run(args: RunArgs) -> i32 {
    match run_inner(&args) {
        Ok(code) => code,
        Err(e) => {
            say_error(&e);
            e.exit_code()
        }
    }
}

fn run_inner(args: &RunArgs) -> Result<i32, CageError> {
    // Proxy credentials given on the command line are readable by every process that can read
    // ours in /proc: blank them in our own copy of the arguments.
    for secret in [&args.upstream, &args.gateway].into_iter().flatten() {
        crate::argv::blank_password(secret);
    }
    let file = match &args.policy {
        Some(path) => Some(load_file(path).map_err(|e| CageError::Policy(e.to_string()))?),
        None => None,
    };
    let flags = flags_policy(args).map_err(CageError::Policy)?;
    let policy = Policy::effective(file, flags);
    let user = args
        .user
        .as_deref()
        .map(parse_user)
        .transpose()
        .map_err(CageError::Policy)?;
    let report_target = args.report.as_deref().map(ReportTarget::open).transpose()?;
    let caller_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();

    // First with the step's own namespaces; where they cannot be created, again without them
    // if --best-effort says so (and the report and a note say what that costs).
    let mut shared_namespaces = !nestbox_cage::namespaces_likely_available();
    loop {
        match attempt(args, &policy, user, &caller_env, shared_namespaces) {
            Ok(running) => return Ok(finish(running, report_target)),
            Err(CageError::NamespacesUnavailable(why)) if !shared_namespaces => {
                if !args.best_effort {
                    return Err(CageError::Unsupported(format!(
                        "{why}. nestbox refuses to run the step without them (fail closed): it could see other processes' command lines, and processes it detaches could outlive a killed launcher. `--best-effort` runs it anyway and reports it"
                    )));
                }
                say_error(format!("best effort: {why}; running without them"));
                shared_namespaces = true;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Plans, prepares and starts the step once.
fn attempt(
    args: &RunArgs,
    policy: &Policy,
    user: Option<(u32, u32)>,
    caller_env: &[(OsString, OsString)],
    shared_namespaces: bool,
) -> Result<Started, CageError> {
    let mut policy = policy.clone();
    let step_id = nestbox_cage::new_step_id();
    let gateway = gateway_options(args, &policy)?;
    if shared_namespaces && policy.net.mode == NetMode::Netns {
        return Err(CageError::NamespacesUnavailable(
            "--net-mode netns needs the step's own namespaces, which cannot be created here; use --net-mode port".into(),
        ));
    }
    if shared_namespaces {
        policy.net.mode = NetMode::Port;
    }
    let mut cell = if policy.net.wants_network() || gateway.is_some() {
        let upstream = if args.no_upstream {
            UpstreamChoice::None
        } else if let Some(u) = &policy.net.upstream {
            UpstreamChoice::Explicit(u.text.clone())
        } else {
            UpstreamChoice::FromEnvironment
        };
        let opts = CellOptions {
            upstream,
            audit: args.audit.clone(),
            caller_env: caller_env.to_vec(),
            gateway,
        };
        let mut cell = CellNetwork::plan(&policy.net, &opts)?;
        // The relay starts now and configures itself while the step is prepared.
        cell.start_relay_early(&step_id)?;
        for path in &cell.read_paths {
            policy.fs.push(
                PathRule::parse(
                    &path.to_string_lossy(),
                    Access::Read,
                    Origin::Flag("--gateway"),
                )
                .map_err(CageError::Policy)?,
            );
        }
        Some(cell)
    } else {
        if policy.net.mode == NetMode::Netns || args.audit.is_some() || args.upstream.is_some() {
            return Err(CageError::Policy(
                "network options were given but no host is allowed: add --allow HOST or --preset NAME (without them the step has no network at all)".into(),
            ));
        }
        None
    };
    let (network, extra_env) = match &cell {
        Some(c) => (c.network.clone(), c.extra_env.clone()),
        None => Default::default(),
    };
    let request = StepRequest {
        policy,
        command: args.command.clone(),
        workdir: args.workdir.clone(),
        caller_env: caller_env.to_vec(),
        best_effort: args.best_effort,
        keep_tmp: args.keep_tmp,
        user,
        network,
        extra_env,
        shared_namespaces,
        step_id: Some(step_id),
    };
    let prepared = PreparedStep::prepare(request)?;
    let timeout = prepared.timeout;
    for d in &prepared.report.dropped {
        say_error(format!("best effort: NOT enforced: {d}"));
    }
    if prepared.report.processes == nestbox_cage::plan::SHARED_PIDS_NOTE {
        say_error(format!("note: {}", prepared.report.processes));
    }
    if cell.as_ref().is_some_and(|c| c.mode() == NetMode::Port) && args.net_mode.is_none() {
        say_error(
            "note: port mode (the step's own network namespace cannot be created here): Landlock lets the step reach the relay's port only, but on any host; see the report",
        );
    }
    let step_id = prepared.report.step_id.clone();
    let running = match cell.as_mut() {
        Some(cell) => {
            let mut hook = |started: nestbox_cage::Started<'_>| cell.start_relay(started, &step_id);
            prepared.spawn(Some(&mut hook))?
        }
        None => prepared.spawn(None)?,
    };
    Ok(Started {
        running,
        timeout,
        _cell: cell,
    })
}

/// A started step, with what must live as long as it does (its network cell holds the CA
/// bundle the step reads, and the gateway registration).
struct Started {
    running: RunningStep,
    timeout: Option<std::time::Duration>,
    _cell: Option<CellNetwork>,
}

/// Waits for the step, says how it ended, writes the report; returns the exit status.
fn finish(started: Started, report_target: Option<ReportTarget>) -> i32 {
    let (outcome, report) = started.running.wait();
    describe_end(&outcome, started.timeout);
    if let Some(target) = report_target {
        target.write(&report);
    }
    outcome.status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_specs_parse() {
        assert_eq!(parse_user("0").unwrap(), (0, 0));
        assert_eq!(parse_user("65534:65534").unwrap(), (65534, 65534));
        assert_eq!(parse_user("root").unwrap(), (0, 0));
        assert!(parse_user("no-such-user-here").is_err());
        assert!(parse_user("1000:staff").is_err());
    }
}
