//! `nestbox exec`: run a command on the backend the configuration names (local cage, Docker
//! or Podman, SSH, Apptainer, Slurm, Modal, Daytona), in the foreground or as a background
//! job, and manage jobs.
//! The work is `nestbox_exec`'s; this file turns flags into its configuration and prints.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nestbox_exec::{
    ApptainerConfig, BackendConfig, BackendKind, CallError, CapturedOutput, CommandSpec,
    DaytonaConfig, DaytonaOnClose, DockerConfig, ExecConfig, ExecError, HostKeyPolicy, JobId,
    JobState, JobStatus, LocalConfig, ModalConfig, ModalCredentials, ModalManaged, ProcessOp,
    Session, SlurmConfig, SshConfig, Step, Stream,
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
  nestbox exec --backend slurm --partition debug --cpus 2 --memory 4GiB -- make test
  nestbox exec --backend modal --image python:3.12-slim -- python3 -c 'print(1)'
  nestbox exec --backend daytona --daytona-name ci-box -- make test
  nestbox exec --config exec.toml --background -- ./long-job.sh     # prints a job id
  nestbox exec --config exec.toml --output JOB --offset 1024        # tail from an offset
  nestbox exec --config exec.toml --wait JOB --timeout 5m
  nestbox exec --config exec.toml --kill JOB

Every command and job operation goes through the guard and the hooks first (see
nestbox mcp --help and examples/hooks/); a refusal exits 125 and says which rule or hook.

The backend is the one named: if it cannot be built (no engine socket, host unreachable,
apptainer missing), nestbox exec refuses with the reason and runs nothing elsewhere.

Exit status: the command's own; 124 if it timed out (its whole process tree was killed);
127 if the command was not found; 125 if nestbox refused or failed; 75 if --wait returned
before the job ended.")]
pub struct ExecArgs {
    #[command(flatten)]
    pub(crate) flags: Box<ExecFlags>,
}

#[derive(Args, Debug)]
pub(crate) struct ExecFlags {
    #[command(flatten)]
    pub(crate) gate: crate::gate_args::GateArgs,

    /// Exec configuration file (TOML, `[backend] kind = ...`); backend flags below are then not allowed.
    #[arg(long, value_name = "FILE", conflicts_with = "backend")]
    config: Option<PathBuf>,
    /// The backend: local, docker, ssh, apptainer, slurm, modal or daytona.
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
    /// Memory limit (docker, slurm, modal, daytona), e.g. 512MiB.
    #[arg(long, value_name = "SIZE", help_heading = "Docker and Apptainer")]
    memory: Option<String>,
    /// CPUs (docker, modal: e.g. 1.5; slurm, daytona: whole CPUs).
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
    /// Let the container reach HOST through a relay (docker; repeatable; relay allowlist
    /// syntax). Without it the container has no network at all.
    #[arg(
        long = "allow-host",
        value_name = "HOST[:PORT]",
        help_heading = "Docker and Apptainer"
    )]
    allow_hosts: Vec<String>,

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

    /// Policy file for the cage (local; slurm: a path on the compute nodes).
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

    /// Slurm partition (slurm).
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    partition: Option<String>,
    /// Slurm account to charge (slurm).
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    account: Option<String>,
    /// Slurm's own time limit for jobs without --timeout (slurm), e.g. 2h.
    #[arg(long, value_name = "DURATION", help_heading = "Slurm")]
    time_limit: Option<String>,
    /// Shared directory for job files, seen by this machine and the compute nodes (slurm).
    #[arg(long, value_name = "DIR", help_heading = "Slurm")]
    jobs_dir: Option<PathBuf>,
    /// Run uncaged on the compute node (slurm; default: under nestbox run, refused where it is missing).
    #[arg(long, help_heading = "Slurm")]
    no_cage: bool,
    /// The nestbox executable on the compute nodes (slurm; default: nestbox on their PATH).
    #[arg(long, value_name = "PATH", help_heading = "Slurm")]
    launcher: Option<String>,
    /// The cluster's slurm.conf (slurm; default: SLURM_CONF or the client tools' own lookup).
    #[arg(long, value_name = "FILE", help_heading = "Slurm")]
    slurm_conf: Option<PathBuf>,

    /// Which Modal credentials: auto, direct (yours) or managed (a gateway holds them).
    #[arg(long, value_name = "MODE", help_heading = "Modal")]
    modal_credentials: Option<String>,
    /// The credential gateway's endpoint for Modal's API (modal, managed credentials).
    #[arg(long, value_name = "URL", help_heading = "Modal")]
    modal_gateway: Option<String>,
    /// The Modal profile in ~/.modal.toml (modal; default: MODAL_PROFILE, else the active one).
    #[arg(long, value_name = "NAME", help_heading = "Modal")]
    modal_profile: Option<String>,
    /// Let the sandbox reach the network (modal, daytona; default: blocked).
    #[arg(long, help_heading = "Modal")]
    allow_network: bool,
    /// Disk size (modal, daytona), e.g. 10GiB.
    #[arg(long, value_name = "SIZE", help_heading = "Modal")]
    disk: Option<String>,

    /// Sandbox name: resumed when it exists, else created with it (daytona).
    #[arg(long, value_name = "NAME", help_heading = "Daytona")]
    daytona_name: Option<String>,
    /// Snapshot to create the sandbox from (daytona).
    #[arg(long, value_name = "NAME", help_heading = "Daytona")]
    snapshot: Option<String>,
    /// What to do with the sandbox afterwards: delete, stop or keep (daytona).
    #[arg(long, value_name = "WHAT", help_heading = "Daytona")]
    on_close: Option<String>,

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
    pub(crate) background: bool,
    /// Print results as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Where nestbox keeps spilled output, local jobs and leases.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Print a job's status.
    #[arg(long, value_name = "JOB", group = "job_op")]
    pub(crate) poll: Option<String>,
    /// Print a job's output from --offset (at most --limit bytes).
    #[arg(long, value_name = "JOB", group = "job_op")]
    pub(crate) output: Option<String>,
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
    pub(crate) wait: Option<String>,
    /// Kill a job's whole process tree and print its final status.
    #[arg(long, value_name = "JOB", group = "job_op")]
    pub(crate) kill: Option<String>,
    /// Delete a job's files (killing it first if it runs).
    #[arg(long, value_name = "JOB", group = "job_op")]
    pub(crate) forget: Option<String>,

    /// The command and its arguments.
    #[arg(last = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
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

pub(crate) fn config_from_flags(a: &ExecFlags) -> Result<ExecConfig, ExecError> {
    if let Some(path) = &a.config {
        let mut c = ExecConfig::from_file(path)?;
        if a.state_dir.is_some() {
            c.state_dir = a.state_dir.clone();
        }
        return Ok(c);
    }
    let Some(name) = &a.backend else {
        return Err(usage(
            "name a backend with --backend (local, docker, ssh, apptainer, slurm, modal, daytona) or give --config FILE",
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
                allow_hosts: a.allow_hosts.clone(),
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
        BackendKind::Slurm => BackendConfig::Slurm(slurm_config(a)?),
        BackendKind::Modal => BackendConfig::Modal(modal_config(a)?),
        BackendKind::Daytona => BackendConfig::Daytona(daytona_config(a)?),
    };
    let mut c = ExecConfig::new(backend);
    c.state_dir = a.state_dir.clone();
    Ok(c)
}

fn size_flag(name: &str, value: &Option<String>) -> Result<Option<u64>, ExecError> {
    value
        .as_deref()
        .map(|v| units::parse_size(v).map_err(|e| usage(format!("--{name}: {e}"))))
        .transpose()
}

fn whole_cpus(a: &ExecFlags, backend: &str) -> Result<Option<u32>, ExecError> {
    match a.cpus {
        None => Ok(None),
        Some(c) if c >= 1.0 && c.fract() == 0.0 && c <= f64::from(u32::MAX) => Ok(Some(c as u32)),
        Some(c) => Err(usage(format!(
            "--cpus {c}: the {backend} backend takes a whole number of CPUs"
        ))),
    }
}

fn slurm_config(a: &ExecFlags) -> Result<SlurmConfig, ExecError> {
    Ok(SlurmConfig {
        partition: a.partition.clone(),
        account: a.account.clone(),
        cpus: whole_cpus(a, "slurm")?,
        memory: size_flag("memory", &a.memory)?,
        time_limit: a
            .time_limit
            .as_deref()
            .map(|t| units::parse_duration(t).map_err(|e| usage(format!("--time-limit: {e}"))))
            .transpose()?,
        jobs_dir: a.jobs_dir.clone(),
        cage: !a.no_cage,
        launcher: a.launcher.clone(),
        policy: a.policy.as_ref().map(|p| p.to_string_lossy().into_owned()),
        slurm_conf: a.slurm_conf.clone(),
        ..SlurmConfig::default()
    })
}

fn modal_config(a: &ExecFlags) -> Result<ModalConfig, ExecError> {
    let credentials = match a.modal_credentials.as_deref() {
        None | Some("auto") => ModalCredentials::Auto,
        Some("direct") => ModalCredentials::Direct,
        Some("managed") => ModalCredentials::Managed,
        Some(other) => {
            return Err(usage(format!(
                "--modal-credentials {other}: the modes are auto, direct and managed"
            )));
        }
    };
    Ok(ModalConfig {
        credentials,
        managed: a.modal_gateway.as_ref().map(|url| ModalManaged {
            server_url: url.clone(),
            token_id: "nestbox:resolve:env:MODAL_TOKEN_ID".into(),
            token_secret: "nestbox:resolve:env:MODAL_TOKEN_SECRET".into(),
            ca_file: None,
        }),
        profile: a.modal_profile.clone(),
        image: a
            .image
            .clone()
            .ok_or_else(|| usage("--backend modal needs --image"))?,
        cpu: a.cpus,
        memory: size_flag("memory", &a.memory)?,
        disk: size_flag("disk", &a.disk)?,
        block_network: !a.allow_network,
        ..ModalConfig::default()
    })
}

fn daytona_config(a: &ExecFlags) -> Result<DaytonaConfig, ExecError> {
    let on_close = match a.on_close.as_deref() {
        None => None,
        Some("delete") => Some(DaytonaOnClose::Delete),
        Some("stop") => Some(DaytonaOnClose::Stop),
        Some("keep") => Some(DaytonaOnClose::Keep),
        Some(other) => {
            return Err(usage(format!(
                "--on-close {other}: the choices are delete, stop and keep"
            )));
        }
    };
    Ok(DaytonaConfig {
        name: a.daytona_name.clone(),
        snapshot: a.snapshot.clone(),
        cpu: whole_cpus(a, "daytona")?,
        memory: size_flag("memory", &a.memory)?,
        disk: size_flag("disk", &a.disk)?,
        network_block_all: !a.allow_network,
        on_close,
        ..DaytonaConfig::default()
    })
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

/// What `nestbox mcp` gives every command: `--env`, `--workdir` and `--timeout`.
pub(crate) fn server_defaults(a: &ExecFlags) -> Result<crate::mcp::Defaults, ExecError> {
    let mut env = std::collections::BTreeMap::new();
    for item in &a.env {
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => (
                item.clone(),
                std::env::var(item)
                    .map_err(|_| usage(format!("cannot forward {item}: it is not set")))?,
            ),
        };
        nestbox_exec::backend::check_env_name(&name)?;
        env.insert(name, value);
    }
    Ok(crate::mcp::Defaults {
        env,
        workdir: a.workdir.clone(),
        timeout: timeout(a)?,
    })
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

async fn perform(session: &Session, action: Action, a: &ExecFlags) -> Result<i32, CallError> {
    const TOOL: &str = "exec";
    let op = |op| session.process(TOOL, op);
    match action {
        Action::Run(spec) => {
            let r = session.run(TOOL, &Step::argv(spec)).await?.value;
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
            let id = session.spawn(TOOL, &Step::argv(spec)).await?.value;
            if a.json {
                print_json(&serde_json::json!({ "job": id }));
            } else {
                println!("{id}");
            }
            Ok(0)
        }
        Action::Poll(id) => {
            let s = op(ProcessOp::Poll(id))
                .await?
                .value
                .into_status()
                .expect("a status");
            print_status(&s, a.json);
            Ok(0)
        }
        Action::Output(id, stream) => {
            let chunk = op(ProcessOp::Log {
                job: id,
                stream,
                offset: a.offset,
                limit: a.limit,
            })
            .await?
            .value
            .into_log()
            .expect("a log");
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
            let waiting = crate::progress::Spinner::start(format!("waiting for job {id}"));
            let s = op(ProcessOp::Wait {
                job: id,
                timeout: limit,
            })
            .await?
            .value
            .into_status()
            .expect("a status");
            drop(waiting);
            print_status(&s, a.json);
            Ok(job_exit(&s))
        }
        Action::Kill(id) => {
            let s = op(ProcessOp::Kill(id))
                .await?
                .value
                .into_status()
                .expect("a status");
            print_status(&s, a.json);
            Ok(0)
        }
        Action::Forget(id) => {
            op(ProcessOp::Forget(id)).await?;
            Ok(0)
        }
    }
}

/// Runs `nestbox exec`; returns the process exit status.
pub fn run(args: ExecArgs) -> i32 {
    let args = *args.flags;
    let outcome = (|| -> Result<i32, CallError> {
        let config = config_from_flags(&args)?;
        let action = action(&args)?;
        nestbox_exec::block_on(async {
            let preparing = crate::progress::Spinner::start(format!(
                "preparing the {} backend",
                config.backend.kind()
            ));
            let backend = nestbox_exec::open(&config).await;
            drop(preparing);
            let backend = backend?;
            let gate = args.gate.gate(backend.descriptor()).map_err(usage)?;
            let session = Session::new(backend, gate);
            let code = perform(&session, action, &args).await;
            let _ = session.close().await;
            code
        })
    })();
    match outcome {
        Ok(code) => code,
        Err(CallError::Denied(d)) if args.json => {
            print_json(&serde_json::json!({ "refused": d }));
            125
        }
        Err(e) => {
            say_error(&e);
            e.exit_code()
        }
    }
}
