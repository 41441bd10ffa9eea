//! From a policy and a command to a prepared step: every path opened, the Landlock ruleset and
//! the seccomp program built, the environment and argv laid out as C strings. Nothing here runs
//! in the child; [`crate::spawn`] only reads what this module prepared.

use std::ffi::{CString, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nestbox_policy::{Access, Policy};

use crate::cgroup::PidsCgroup;
use crate::env::{self, EnvInputs};
use crate::error::{CageError, setup};
use crate::init::PidNsPlan;
use crate::landlock::{self, Ruleset, fs as llfs, scope};
use crate::netns::NetnsPlan;
use crate::report::{
    LandlockReport, LimitReport, NetworkReport, Report, RuleReport, SeccompReport,
};
use crate::resolve::{self, ResolveContext, ResolvedPath};
use crate::seccomp;
use crate::stepdir::StepDir;

/// What the report says when the step shares the launcher's PID namespace.
pub const SHARED_PIDS_NOTE: &str = "shared PID namespace (the step's own namespaces cannot be created here): the step can see other processes' command lines in /proc, and processes it detaches may outlive a launcher killed with SIGKILL";

/// How the step reaches the network. The relay integration fills in the port modes.
#[derive(Clone, Debug, Default)]
pub enum Network {
    /// No network at all: every TCP connect and bind is refused by Landlock.
    #[default]
    None,
    /// netns mode: the step gets its own network namespace with only `lo`; a listener on
    /// 127.0.0.1:`port` is created inside it and handed to the `before_exec` hook (for the
    /// relay). TCP connect is allowed to that port only.
    Netns { port: u16, report: NetworkReport },
    /// Port mode: TCP connect allowed to these ports only (the relay's).
    Ports {
        connect: Vec<u16>,
        report: NetworkReport,
    },
}

/// What the caller asks for.
#[derive(Clone, Debug, Default)]
pub struct StepRequest {
    /// The effective policy (defaults, file and flags already merged).
    pub policy: Policy,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Working directory; the caller's current directory when `None`.
    pub workdir: Option<PathBuf>,
    /// The launcher's environment, from which only named variables pass.
    pub caller_env: Vec<(OsString, OsString)>,
    /// Run with less protection when the kernel cannot give it all, and report what was dropped.
    pub best_effort: bool,
    /// Keep the private temp dir after the step.
    pub keep_tmp: bool,
    /// Run the step as this uid and gid (the launcher must be root).
    pub user: Option<(u32, u32)>,
    pub network: Network,
    /// Variables set by nestbox itself (proxy settings), below the policy's own.
    pub extra_env: Vec<(String, OsString)>,
    /// Run without the step's own PID, mount and network namespaces, even where they could be
    /// created (the launcher falls back to this when they cannot, and reports it).
    pub shared_namespaces: bool,
    /// The step's id, when the caller made one up front (to start its relay early); otherwise
    /// a fresh random one.
    pub step_id: Option<String>,
}

/// Everything the child needs between fork and exec, allocated beforehand.
pub(crate) struct ChildPlan {
    pub program: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub workdir: CString,
    pub ruleset: Option<Ruleset>,
    pub filter: Option<Vec<seccomp::Insn>>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    pub user: Option<(u32, u32)>,
    pub netns: Option<NetnsPlan>,
    /// The step's own PID namespace with a fresh /proc, when the kernel allows it.
    pub pid_ns: Option<PidNsPlan>,
    /// With `pid_ns` and no relay: a network namespace holding only `lo` (no network at all,
    /// but the step's own local servers work).
    pub empty_netns: bool,
    /// NULL-terminated pointers into `argv` and `envp`, built by `seal` just before the fork.
    pub argv_ptrs: Vec<*const libc::c_char>,
    pub envp_ptrs: Vec<*const libc::c_char>,
}

/// A step ready to start: [`PreparedStep::spawn`] forks it.
pub struct PreparedStep {
    pub report: Report,
    pub timeout: Option<Duration>,
    pub(crate) child: ChildPlan,
    /// Moved into the running step (taken once).
    pub(crate) dir: Option<StepDir>,
    pub(crate) cgroup: Option<PidsCgroup>,
}

fn cstring(bytes: Vec<u8>, what: &str) -> Result<CString, CageError> {
    CString::new(bytes).map_err(|_| CageError::Policy(format!("{what} contains a NUL byte")))
}

fn caller_home(caller_env: &[(OsString, OsString)]) -> Option<PathBuf> {
    caller_env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute())
}

/// Finds the program: a name with a `/` is taken as a path (relative to the working directory),
/// anything else is searched in the step's own `PATH`.
fn find_program(name: &OsString, workdir: &Path, path: &OsString) -> Result<PathBuf, CageError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(CageError::Policy("the command is empty".into()));
    }
    if bytes.contains(&b'/') {
        let p = workdir.join(Path::new(name));
        if !p.exists() {
            return Err(CageError::NotFound(format!(
                "{}: no such file (looked at {})",
                name.to_string_lossy(),
                p.display()
            )));
        }
        return Ok(p);
    }
    for dir in path.as_bytes().split(|&b| b == b':') {
        let candidate = Path::new(std::ffi::OsStr::from_bytes(dir)).join(name);
        if let Ok(c) = CString::new(candidate.as_os_str().as_bytes()) {
            // SAFETY: c is a valid C string.
            if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 && candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(CageError::NotFound(format!(
        "{}: command not found in the step's PATH ({}); give its full path, or add its directory to the exec list with --exec DIR",
        name.to_string_lossy(),
        path.to_string_lossy()
    )))
}

fn access_rights(access: Access) -> u64 {
    let read = llfs::READ_FILE | llfs::READ_DIR;
    match access {
        Access::Read => read,
        Access::Exec => read | llfs::EXECUTE,
        Access::Write => {
            read | llfs::WRITE_FILE
                | llfs::REMOVE_DIR
                | llfs::REMOVE_FILE
                | llfs::MAKE_DIR
                | llfs::MAKE_REG
                | llfs::MAKE_SOCK
                | llfs::MAKE_FIFO
                | llfs::MAKE_SYM
                | llfs::REFER
                | llfs::TRUNCATE
                | llfs::IOCTL_DEV
        }
    }
}

/// The rlimits to set, and their report. `nproc_by_cgroup`: the process limit is enforced by a
/// pids cgroup instead (root steps, which RLIMIT_NPROC does not bind).
fn rlimits(
    policy: &Policy,
    nproc_by_cgroup: Option<&PidsCgroup>,
) -> (
    Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    Vec<LimitReport>,
) {
    let l = &policy.limits;
    let wanted: [(&'static str, libc::__rlimit_resource_t, Option<u64>); 6] = [
        ("core", libc::RLIMIT_CORE, Some(0)),
        ("processes", libc::RLIMIT_NPROC, l.processes),
        ("open_files", libc::RLIMIT_NOFILE, l.open_files),
        ("memory", libc::RLIMIT_AS, l.memory),
        ("file_size", libc::RLIMIT_FSIZE, l.file_size),
        ("cpu", libc::RLIMIT_CPU, l.cpu.map(|d| d.as_secs().max(1))),
    ];
    let mut out = Vec::new();
    let mut report = Vec::new();
    for (name, resource, value) in wanted {
        let Some(value) = value else { continue };
        if resource == libc::RLIMIT_NPROC
            && let Some(cg) = nproc_by_cgroup
        {
            report.push(LimitReport {
                name,
                value,
                note: Some(format!(
                    "enforced by the pids cgroup {}",
                    cg.path().display()
                )),
            });
            continue;
        }
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out pointer.
        unsafe { libc::getrlimit(resource, &mut cur) };
        let mut note = None;
        let value = if value > cur.rlim_max {
            note = Some(format!(
                "asked {value}, lowered to the hard limit {} (raising it needs CAP_SYS_RESOURCE)",
                cur.rlim_max
            ));
            cur.rlim_max
        } else {
            value
        };
        out.push((
            resource,
            libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            },
        ));
        report.push(LimitReport { name, value, note });
    }
    (out, report)
}

impl PreparedStep {
    /// Resolves and checks everything; refuses with a clear error when the policy cannot be
    /// enforced as written.
    pub fn prepare(req: StepRequest) -> Result<PreparedStep, CageError> {
        if req.command.is_empty() {
            return Err(CageError::Policy(
                "no command given: usage is `nestbox run [OPTIONS] -- CMD [ARGS...]`".into(),
            ));
        }
        let workdir = match &req.workdir {
            Some(w) => w.clone(),
            None => std::env::current_dir()
                .map_err(|e| setup("cannot read the current directory", e))?,
        };
        let workdir = std::fs::canonicalize(&workdir).map_err(|e| {
            CageError::Policy(format!("working directory {}: {e}", workdir.display()))
        })?;
        if !workdir.is_dir() {
            return Err(CageError::Policy(format!(
                "working directory {} is not a directory",
                workdir.display()
            )));
        }
        // SAFETY: trivial getters.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if req.user.is_some() && euid != 0 {
            return Err(CageError::Policy(
                "--user needs nestbox to run as root (it switches the step to another user); drop --user to run as yourself".into(),
            ));
        }
        let (uid, gid) = req.user.unwrap_or((euid, egid));

        let dir = StepDir::create(&req.caller_env, req.keep_tmp, req.user, req.step_id.clone())?;

        // Landlock first: whether it is available decides what the report can promise.
        let negotiated = landlock::negotiate(landlock::kernel_abi(), req.best_effort)
            .map_err(CageError::Unsupported)?;
        let mut dropped: Vec<String> = negotiated
            .dropped
            .iter()
            .map(|f| format!("Landlock {} (needs ABI {}): {}", f.name, f.abi, f.without))
            .collect();

        let home = caller_home(&req.caller_env);
        let ctx = ResolveContext {
            workdir: &workdir,
            home: home.as_deref(),
        };
        let mut resolved: Vec<ResolvedPath> = Vec::new();
        let mut skipped = Vec::new();
        for rule in &req.policy.fs {
            resolve::resolve(rule, &ctx, &mut resolved, &mut skipped)?;
        }
        for access in [Access::Write, Access::Exec] {
            let fd = resolve::open_dir(dir.root())?;
            resolved.push(ResolvedPath {
                path: dir.root().to_path_buf(),
                fd,
                is_dir: true,
                access,
                origin: nestbox_policy::Origin::Default,
            });
        }

        // The step gets its own PID, mount and network namespaces where the kernel allows it.
        let isolate = !req.shared_namespaces && crate::init::likely_available();
        if matches!(req.network, Network::Netns { .. }) && !isolate {
            return Err(CageError::NamespacesUnavailable(
                "netns mode needs the step's own namespaces, which cannot be created here".into(),
            ));
        }
        let empty_netns = isolate && matches!(req.network, Network::None);
        // In its own network namespace (only `lo`, and the relay in netns mode) the namespace is
        // the network boundary, so TCP inside it stays free: a test suite may run its own local
        // servers. Elsewhere Landlock governs TCP, and the filter refuses `listen`.
        let own_netns = empty_netns || matches!(req.network, Network::Netns { .. });
        let ruleset = if negotiated.abi > 0 {
            Some(
                Ruleset::create(negotiated.abi, !own_netns)
                    .map_err(|e| setup("creating the Landlock ruleset", e))?,
            )
        } else {
            None
        };
        let mut rules = Vec::new();
        if let Some(rs) = &ruleset {
            for r in &resolved {
                let granted = rs
                    .allow_path(r.fd.as_fd(), access_rights(r.access), r.is_dir)
                    .map_err(|e| {
                        setup(
                            &format!("adding a Landlock rule for {}", r.path.display()),
                            e,
                        )
                    })?;
                rules.push(RuleReport {
                    path: r.path.display().to_string(),
                    access: r.access.key(),
                    rights: llfs::names(granted),
                    origin: r.origin.to_string(),
                });
            }
        }
        let connect_ports = match &req.network {
            Network::Ports { connect, .. } => connect.clone(),
            _ => Vec::new(),
        };
        let netns = match &req.network {
            Network::Netns { port, .. } => Some(NetnsPlan::new(*port)),
            _ => None,
        };
        let tcp_restricted = negotiated.abi >= 4 && !own_netns;

        if let Some(rs) = &ruleset
            && tcp_restricted
        {
            for &port in &connect_ports {
                rs.allow_port(port, landlock::net::CONNECT_TCP)
                    .map_err(|e| {
                        setup(&format!("adding a Landlock rule for TCP port {port}"), e)
                    })?;
            }
        }

        // The exec roots, as the kernel sees them, for PATH and the early "may not execute" check.
        let exec_roots: Vec<PathBuf> = resolved
            .iter()
            .filter(|r| r.access == Access::Exec)
            .map(|r| r.path.clone())
            .collect();
        let not_on_path = vec![workdir.clone(), dir.root().to_path_buf()];

        let filter_options = seccomp::FilterOptions {
            deny_listen: !own_netns,
        };
        let seccomp_ok = seccomp::available();
        let filter = match seccomp_ok {
            Ok(()) => Some(seccomp::build(filter_options)),
            Err(e) if req.best_effort => {
                dropped.push(format!(
                    "seccomp filter ({e}): unix sockets, io_uring, namespaces, ptrace and the rest of the deny list are not blocked"
                ));
                None
            }
            Err(e) => {
                return Err(CageError::Unsupported(format!(
                    "seccomp filters are unavailable ({e}); without them unix sockets, io_uring, ptrace and namespaces stay open to the step, so nestbox refuses to run it (fail closed). `--best-effort` runs without the filter and reports it"
                )));
            }
        };

        let env_inputs = EnvInputs {
            caller: &req.caller_env,
            policy: &req.policy.env,
            exec_roots: &exec_roots,
            not_on_path: &not_on_path,
            home: &dir.home(),
            tmpdir: &dir.tmp(),
        };
        let env = env::build(&env_inputs, &req.extra_env);
        let step_path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let program = find_program(&req.command[0], &workdir, &step_path)?;
        if ruleset.is_some() {
            let real = std::fs::canonicalize(&program).unwrap_or(program.clone());
            if !exec_roots.iter().any(|r| real.starts_with(r)) {
                return Err(CageError::NotExecutable(format!(
                    "{}: the policy does not allow executing {} (only beneath the exec list: {}); add its directory with --exec DIR",
                    req.command[0].to_string_lossy(),
                    real.display(),
                    exec_roots
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }

        // RLIMIT_NPROC does not bind root: a root step's process limit needs a pids cgroup.
        let mut cgroup = None;
        if let Some(max) = req.policy.limits.processes
            && uid == 0
        {
            match PidsCgroup::create(dir.step_id(), max) {
                Ok(cg) => cgroup = Some(cg),
                Err(e) if req.best_effort => dropped.push(format!(
                    "process limit {max}: the step runs as root, which RLIMIT_NPROC does not bind, and {e}"
                )),
                Err(e) => {
                    return Err(CageError::Unsupported(format!(
                        "the policy limits the step to {max} processes, but the step runs as root, which RLIMIT_NPROC does not bind, and a pids cgroup is not available ({e}). Run the step as another user (--user), give nestbox a writable pids cgroup, or use --best-effort to run without the limit"
                    )));
                }
            }
        }
        let (rlimits, limit_report) = rlimits(&req.policy, cgroup.as_ref());
        let pid_ns = isolate.then(PidNsPlan::new);
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in &env {
            let mut kv = k.clone().into_bytes();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(cstring(kv, &format!("environment variable {k}"))?);
        }
        let argv = req
            .command
            .iter()
            .map(|a| cstring(a.clone().into_vec(), "an argument"))
            .collect::<Result<Vec<_>, _>>()?;

        let privileged = euid == 0;
        let report = Report {
            nestbox_version: env!("CARGO_PKG_VERSION"),
            step_id: dir.step_id().to_string(),
            command: req
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            program: program.display().to_string(),
            workdir: workdir.display().to_string(),
            tmpdir: dir.root().display().to_string(),
            keep_tmp: req.keep_tmp,
            uid,
            gid,
            landlock: LandlockReport {
                enforced: ruleset.is_some(),
                kernel_abi: negotiated.kernel_abi,
                abi: negotiated.abi,
                handled_fs: ruleset
                    .as_ref()
                    .map(|r| llfs::names(r.handled_fs))
                    .unwrap_or_default(),
                rules,
                skipped,
                tcp_connect: tcp_restricted.then(|| connect_ports.clone()),
                tcp_bind: tcp_restricted.then(Vec::new),
                scopes: match &ruleset {
                    Some(r) => [
                        (scope::SIGNAL, "signal"),
                        (scope::ABSTRACT_UNIX_SOCKET, "abstract_unix_socket"),
                    ]
                    .iter()
                    .filter(|(bit, _)| r.scoped & bit != 0)
                    .map(|(_, n)| *n)
                    .collect(),
                    None => Vec::new(),
                },
            },
            seccomp: SeccompReport {
                enforced: filter.is_some(),
                filter: filter
                    .as_ref()
                    .map(|f| seccomp::summary(filter_options, f.len())),
            },
            network: match &req.network {
                Network::None => NetworkReport {
                    mode: "none".into(),
                    notes: vec![if empty_netns {
                        "no network: the step has its own network namespace holding only lo (its own local servers work, nothing else is reachable), and the seccomp filter refuses every socket but TCP".into()
                    } else if tcp_restricted {
                        "no network: Landlock refuses every TCP connect and bind, and the seccomp filter refuses listen, TCP Fast Open and every socket but TCP".into()
                    } else {
                        "TCP is NOT restricted on this kernel (best effort)".into()
                    }],
                    relay: None,
                },
                Network::Netns { report, .. } | Network::Ports { report, .. } => report.clone(),
            },
            processes: if pid_ns.is_some() {
                "own PID namespace with a fresh /proc: the step sees only its own processes, and every one of them ends with the step".into()
            } else {
                SHARED_PIDS_NOTE.into()
            },
            no_new_privs: true,
            capabilities: if privileged {
                "all dropped: bounding, permitted, effective, inheritable and ambient sets cleared"
                    .into()
            } else {
                "none held (unprivileged); no_new_privs keeps exec from granting any".into()
            },
            env: env.iter().map(|(k, _)| k.clone()).collect(),
            limits: limit_report,
            timeout_ms: req.policy.limits.timeout.map(|d| d.as_millis()),
            dropped,
            outcome: None,
        };

        let child = ChildPlan {
            program: cstring(program.as_os_str().as_bytes().to_vec(), "the program path")?,
            argv,
            envp,
            workdir: cstring(
                workdir.as_os_str().as_bytes().to_vec(),
                "the working directory",
            )?,
            ruleset,
            filter,
            rlimits,
            user: req.user,
            netns,
            pid_ns,
            empty_netns,
            argv_ptrs: Vec::new(),
            envp_ptrs: Vec::new(),
        };
        Ok(PreparedStep {
            report,
            timeout: req.policy.limits.timeout,
            child,
            dir: Some(dir),
            cgroup,
        })
    }

    /// The step's private directory (holds `home/` and `tmp/`).
    pub fn step_dir(&self) -> &Path {
        self.dir.as_ref().expect("not yet spawned").root()
    }
}

/// What [`check_paths`] found.
#[derive(Debug)]
pub struct PathCheck {
    /// How many paths the entries resolved to.
    pub resolved: usize,
    /// Optional entries absent on this machine.
    pub skipped: Vec<crate::resolve::SkippedPath>,
}

/// Resolves every filesystem entry of `policy` as `prepare` would, without starting anything:
/// the check behind `nestbox policy check`.
pub fn check_paths(
    policy: &Policy,
    workdir: Option<&Path>,
    caller_env: &[(OsString, OsString)],
) -> Result<PathCheck, CageError> {
    let workdir = match workdir {
        Some(w) => w.to_path_buf(),
        None => {
            std::env::current_dir().map_err(|e| setup("cannot read the current directory", e))?
        }
    };
    let home = caller_home(caller_env);
    let ctx = ResolveContext {
        workdir: &workdir,
        home: home.as_deref(),
    };
    let (mut resolved, mut skipped) = (Vec::new(), Vec::new());
    for rule in &policy.fs {
        resolve::resolve(rule, &ctx, &mut resolved, &mut skipped)?;
    }
    Ok(PathCheck {
        resolved: resolved.len(),
        skipped,
    })
}
