//! `nestbox exec`: run a command on the backend the configuration names (local cage, Docker
//! or Podman, SSH, Apptainer), in the foreground or as a background job, and manage jobs.
//! The work is `nestbox_exec`'s; this file turns flags into its configuration and prints.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nestbox_exec::{
    ApptainerConfig, Backend, BackendConfig, BackendKind, CapturedOutput, CommandSpec,
    DockerConfig, ExecConfig, ExecError, HostKeyPolicy, JobId, JobState, JobStatus, LocalConfig,
    SshConfig, Stream,
};
use nestbox_policy::units;

use crate::say_error;

/// Exit status when `--wait` returns and the job is still running.
const STILL_RUNNING: i32 = 75;

/// The flags of `nestbox exec` (boxed: the command enum stays small).
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  nestbox exec --backend docker --image localhost/busybox -- sh -c 'make test'
  nestbox exec --backend ssh --host build1 --ssh-user ci --known-hosts ./known_hosts -- make
  nestbox exec --backend local --timeout 10m --env CI -- pytest -q
  nestbox exec --config exec.toml --background -- ./long-job.sh     # prints a job id
  nestbox exec --config exec.toml --output JOB --offset 1024        # tail from an offset
  nestbox exec --config exec.toml --wait JOB --timeout 5m
  nestbox exec --config exec.toml --kill JOB

The backend is the one named: if it cannot be built (no engine socket, host unreachable,
apptainer missing), nestbox exec refuses with the reason and runs nothing elsewhere.

Exit status: the command's own; 124 if it timed out (its whole process tree was killed);
127 if the command was not found; 125 if nestbox refused or failed; 75 if --wait returned
before the job ended.")]
pub struct ExecArgs {
    #[command(flatten)]
    flags: Box<ExecFlags>,
}

#[derive(Args, Debug)]
struct ExecFlags {
    /// Exec configuration file (TOML, `[backend] kind = ...`); backend flags below are then not allowed.
    #[arg(long, value_name = "FILE", conflicts_with = "backend")]
    config: Option<PathBuf>,
    /// The backend: local, docker, ssh or apptainer.
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,

    /// Image (docker: in the engine already, never pulled; apptainer: a .sif or docker://...).
    #[arg(long, value_name = "IMAGE", help_heading = "Docker and Apptainer")]
    image: Option<String>,
    /// Engine socket (docker; default: DOCKER_HOST, else /var/run/docker.sock).
    #[arg(long, value_name = "PATH", help_heading = "Docker and Apptainer")]
    socket: Option<String>,
    /// User inside the container (docker; default: the image's, or 65534:65534 for root images).
    #[arg(long, value_name = "USER", help_heading = "Docker and Apptainer")]
    user: Option<String>,
    /// Memory limit (docker), e.g. 512MiB.
    #[arg(long, value_name = "SIZE", help_heading = "Docker and Apptainer")]
    memory: Option<String>,
    /// CPU limit in CPUs (docker), e.g. 1.5.
    #[arg(long, value_name = "N", help_heading = "Docker and Apptainer")]
    cpus: Option<f64>,
    /// Most processes in the container (docker).
    #[arg(long, value_name = "N", help_heading = "Docker and Apptainer")]
    pids_limit: Option<i64>,
    /// Read-only root filesystem (docker).
    #[arg(long, help_heading = "Docker and Apptainer")]
    read_only: bool,
    /// Mount SOURCE:TARGET[:ro] (docker) or bind SOURCE[:TARGET[:ro]] (apptainer); repeatable.
    #[arg(
        long = "mount",
        value_name = "SPEC",
        help_heading = "Docker and Apptainer"
    )]
    mounts: Vec<String>,
    /// A container just for this call, removed afterwards (docker; default: reuse a warm one).
    #[arg(long, help_heading = "Docker and Apptainer")]
    no_reuse: bool,

    /// Host to run on (ssh).
    #[arg(long, value_name = "HOST", help_heading = "SSH")]
    host: Option<String>,
    /// Port (ssh).
    #[arg(long, value_name = "PORT", help_heading = "SSH")]
    port: Option<u16>,
    /// Login name (ssh).
    #[arg(long, value_name = "USER", help_heading = "SSH")]
    ssh_user: Option<String>,
    /// Private key (ssh).
    #[arg(long, value_name = "FILE", help_heading = "SSH")]
    identity: Option<PathBuf>,
    /// Known-hosts file (ssh); the host key must be in it.
    #[arg(long, value_name = "FILE", help_heading = "SSH")]
    known_hosts: Option<PathBuf>,
    /// Trust a host key seen for the first time (ssh; default: refuse unknown keys).
    #[arg(long, help_heading = "SSH")]
    accept_new_host_key: bool,

    /// Policy file for the cage (local).
    #[arg(long, value_name = "FILE", help_heading = "Local")]
    policy: Option<PathBuf>,
    /// Allow reading PATH in the cage (local; repeatable).
    #[arg(long, value_name = "PATH", help_heading = "Local")]
    read: Vec<String>,
    /// Allow writing PATH in the cage (local; repeatable).
    #[arg(long, value_name = "PATH", help_heading = "Local")]
    write: Vec<String>,
    /// Allow executing beneath PATH in the cage (local; repeatable).
    #[arg(long = "exec", value_name = "PATH", help_heading = "Local")]
    exec_paths: Vec<String>,

    /// Forward NAME from this environment (or set NAME=VALUE, which puts the value on
    /// nestbox's own command line: prefer NAME); repeatable. Nothing else is forwarded.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Working directory inside the sandbox.
    #[arg(long, value_name = "DIR")]
    workdir: Option<String>,
    /// Kill the command's whole process tree after this long (with --wait: how long to wait).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Start the command as a background job and print its id.
    #[arg(long)]
    background: bool,
    /// Print results as JSON.
    #[arg(long)]
    json: bool,
    /// Where nestbox keeps spilled output, local jobs and leases.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Print a job's status.
    #[arg(long, value_name = "JOB", group = "job_op")]
    poll: Option<String>,
    /// Print a job's output from --offset (at most --limit bytes).
    #[arg(long, value_name = "JOB", group = "job_op")]
    output: Option<String>,
    /// Which stream --output reads: stdout or stderr.
    #[arg(long, value_name = "STREAM", default_value = "stdout")]
    stream: String,
    /// Where --output starts, in bytes.
    #[arg(long, value_name = "N", default_value_t = 0)]
    offset: u64,
    /// Most bytes --output prints.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    limit: usize,
    /// Wait for a job to end (or --timeout to pass) and print its status.
    #[arg(long, value_name = "JOB", group = "job_op")]
    wait: Option<String>,
    /// Kill a job's whole process tree and print its final status.
    #[arg(long, value_name = "JOB", group = "job_op")]
    kill: Option<String>,
    /// Delete a job's files (killing it first if it runs).
    #[arg(long, value_name = "JOB", group = "job_op")]
    forget: Option<String>,

    /// The command and its arguments.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// What the user asked for.
enum Action {
    Run(CommandSpec),
    Spawn(CommandSpec),
    Poll(JobId),
    Output(JobId, Stream),
    Wait(JobId, Option<Duration>),
    Kill(JobId),
    Forget(JobId),
}

fn usage(message: impl Into<String>) -> ExecError {
    ExecError::InvalidRequest(message.into())
}

fn config_from_flags(a: &ExecFlags) -> Result<ExecConfig, ExecError> {
    if let Some(path) = &a.config {
        let mut c = ExecConfig::from_file(path)?;
        if a.state_dir.is_some() {
            c.state_dir = a.state_dir.clone();
        }
        return Ok(c);
    }
    let Some(name) = &a.backend else {
        return Err(usage(
            "name a backend with --backend (local, docker, ssh, apptainer) or give --config FILE",
        ));
    };
    let kind: BackendKind = name.parse()?;
    let backend = match kind {
        BackendKind::Local => BackendConfig::Local(LocalConfig {
            policy: a.policy.clone(),
            read: a.read.clone(),
            write: a.write.clone(),
            exec: a.exec_paths.clone(),
            ..LocalConfig::default()
        }),
        BackendKind::Docker => {
            let mut d = DockerConfig {
                socket: a.socket.clone(),
                image: a
                    .image
                    .clone()
                    .ok_or_else(|| usage("--backend docker needs --image"))?,
                user: a.user.clone(),
                cpus: a.cpus,
                read_only_rootfs: a.read_only,
                mounts: a.mounts.clone(),
                reuse: !a.no_reuse,
                ..DockerConfig::default()
            };
            if let Some(m) = &a.memory {
                d.memory = Some(units::parse_size(m).map_err(|e| usage(format!("--memory: {e}")))?);
            }
            if let Some(p) = a.pids_limit {
                d.pids_limit = p;
            }
            BackendConfig::Docker(d)
        }
        BackendKind::Ssh => BackendConfig::Ssh(SshConfig {
            host: a
                .host
                .clone()
                .ok_or_else(|| usage("--backend ssh needs --host"))?,
            port: a.port,
            user: a.ssh_user.clone(),
            identity: a.identity.clone(),
            known_hosts: a.known_hosts.clone(),
            host_key_policy: if a.accept_new_host_key {
                HostKeyPolicy::AcceptNew
            } else {
                HostKeyPolicy::Strict
            },
            ..SshConfig::default()
        }),
        BackendKind::Apptainer => BackendConfig::Apptainer(ApptainerConfig {
            image: a
                .image
                .clone()
                .ok_or_else(|| usage("--backend apptainer needs --image"))?,
            binds: a.mounts.clone(),
            ..ApptainerConfig::default()
        }),
    };
    let mut c = ExecConfig::new(backend);
    c.state_dir = a.state_dir.clone();
    Ok(c)
}

fn command_spec(a: &ExecFlags) -> Result<CommandSpec, ExecError> {
    let argv = a
        .command
        .iter()
        .map(|s| {
            s.to_str()
                .map(str::to_string)
                .ok_or_else(|| usage("the command must be valid UTF-8"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut spec = CommandSpec::new(argv);
    for item in &a.env {
        spec = match item.split_once('=') {
            Some((name, value)) => spec.env(name, value),
            None => spec.forward_env(item)?,
        };
    }
    spec.workdir = a.workdir.clone();
    spec.timeout = timeout(a)?;
    spec.validate()?;
    Ok(spec)
}

fn timeout(a: &ExecFlags) -> Result<Option<Duration>, ExecError> {
    a.timeout
        .as_deref()
        .map(|t| units::parse_duration(t).map_err(|e| usage(format!("--timeout: {e}"))))
        .transpose()
}

fn action(a: &ExecFlags) -> Result<Action, ExecError> {
    let job = |s: &String| JobId::parse(s);
    let has_command = !a.command.is_empty();
    let op = if let Some(j) = &a.poll {
        Some(Action::Poll(job(j)?))
    } else if let Some(j) = &a.output {
        Some(Action::Output(job(j)?, a.stream.parse()?))
    } else if let Some(j) = &a.wait {
        Some(Action::Wait(job(j)?, timeout(a)?))
    } else if let Some(j) = &a.kill {
        Some(Action::Kill(job(j)?))
    } else if let Some(j) = &a.forget {
        Some(Action::Forget(job(j)?))
    } else {
        None
    };
    match (op, has_command) {
        (Some(_), true) => Err(usage("a job operation takes no command")),
        (Some(op), false) => Ok(op),
        (None, false) => Err(usage(
            "give a command after --, or a job operation (--poll, --output, --wait, --kill, --forget)",
        )),
        (None, true) if a.background => Ok(Action::Spawn(command_spec(a)?)),
        (None, true) => Ok(Action::Run(command_spec(a)?)),
    }
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serializes")
    );
}

fn write_captured(to: &mut dyn Write, c: &CapturedOutput, name: &str) {
    let _ = to.write_all(&c.head);
    if c.truncated {
        let _ = to.flush();
        let omitted = c.total_bytes - (c.head.len() + c.tail.len()) as u64;
        let place = c
            .full_output
            .as_ref()
            .map(|p| format!("full {name} in {}", p.display()))
            .unwrap_or_else(|| "not kept".into());
        say_error(format!("{name}: {omitted} bytes omitted here; {place}"));
        let _ = to.write_all(&c.tail);
    }
    let _ = to.flush();
}

fn describe(s: &JobStatus) -> String {
    match &s.state {
        JobState::Running => format!(
            "{} running: {} bytes of stdout, {} of stderr",
            s.id, s.stdout_bytes, s.stderr_bytes
        ),
        JobState::Lost => format!(
            "{} lost: its supervisor is gone without an exit status",
            s.id
        ),
        JobState::Finished {
            exit_code,
            timed_out,
            killed,
        } => format!(
            "{} finished: exit {exit_code}{}{}; {} bytes of stdout, {} of stderr",
            s.id,
            if *timed_out { ", timed out" } else { "" },
            if *killed { ", killed" } else { "" },
            s.stdout_bytes,
            s.stderr_bytes
        ),
    }
}

fn print_status(s: &JobStatus, json: bool) {
    if json {
        print_json(s);
    } else {
        println!("{}", describe(s));
    }
}

fn job_exit(s: &JobStatus) -> i32 {
    match s.state {
        JobState::Running => STILL_RUNNING,
        JobState::Lost => 125,
        JobState::Finished {
            timed_out: true, ..
        } => 124,
        JobState::Finished { exit_code, .. } => exit_code,
    }
}

async fn perform(backend: &dyn Backend, action: Action, a: &ExecFlags) -> Result<i32, ExecError> {
    match action {
        Action::Run(spec) => {
            let r = backend.run(&spec).await?;
            if a.json {
                print_json(&r);
            } else {
                write_captured(&mut std::io::stdout().lock(), &r.stdout, "stdout");
                write_captured(&mut std::io::stderr().lock(), &r.stderr, "stderr");
            }
            Ok(if r.timed_out {
                124
            } else {
                r.exit_code.unwrap_or(125)
            })
        }
        Action::Spawn(spec) => {
            let id = backend.spawn(&spec).await?;
            if a.json {
                print_json(&serde_json::json!({ "job": id }));
            } else {
                println!("{id}");
            }
            Ok(0)
        }
        Action::Poll(id) => {
            let s = backend.poll(&id).await?;
            print_status(&s, a.json);
            Ok(0)
        }
        Action::Output(id, stream) => {
            let chunk = backend.read(&id, stream, a.offset, a.limit).await?;
            if a.json {
                print_json(&chunk);
            } else {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&chunk.data);
                let _ = out.flush();
                if !chunk.complete {
                    say_error(format!(
                        "more may follow: continue with --offset {}",
                        chunk.next_offset
                    ));
                }
            }
            Ok(0)
        }
        Action::Wait(id, limit) => {
            let s = backend.wait(&id, limit).await?;
            print_status(&s, a.json);
            Ok(job_exit(&s))
        }
        Action::Kill(id) => {
            let s = backend.kill(&id).await?;
            print_status(&s, a.json);
            Ok(0)
        }
        Action::Forget(id) => {
            backend.forget(&id).await?;
            Ok(0)
        }
    }
}

/// Runs `nestbox exec`; returns the process exit status.
pub fn run(args: ExecArgs) -> i32 {
    let args = *args.flags;
    let outcome = (|| {
        let config = config_from_flags(&args)?;
        let action = action(&args)?;
        nestbox_exec::block_on(async {
            let mut backend = nestbox_exec::open(&config).await?;
            let code = perform(backend.as_ref(), action, &args).await;
            let _ = backend.close().await;
            code
        })
    })();
    match outcome {
        Ok(code) => code,
        Err(e) => {
            say_error(&e);
            e.exit_code()
        }
    }
}
