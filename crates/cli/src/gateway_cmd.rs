//! `nestbox gateway`: run the gateway, or ask a running one (`status`, `reload`), or print its
//! CA certificate (`ca`).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use nestbox_net::gateway::{
    CertAuthority, GatewayConfig, cert_path, default_state_dir, request, serve,
};
use nestbox_net::{AuditLog, Limits, StaticHosts};
use nestbox_policy::units::parse_duration;
use serde_json::{Value, json};

use crate::say_error;

/// The address the gateway listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3129";

/// `nestbox gateway`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "Examples:
  nestbox gateway --policy gateway.toml                  # serve (reloads on SIGHUP and on change)
  nestbox gateway status                                 # what is loaded, last reload error, cells
  nestbox gateway ca > gateway-ca.pem                    # the CA that inspected hosts are signed by
  nestbox run --gateway http://127.0.0.1:3129 --credential ANTHROPIC_API_KEY -- python3 agent.py")]
pub struct GatewayArgs {
    #[command(subcommand)]
    action: Option<GatewayAction>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Serving options.
#[derive(Debug, Args)]
struct ServeArgs {
    /// The gateway policy (TOML): rules and credentials. Required to serve.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Listen on this address (loopback by default: the gateway is for this machine).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// State directory: the CA and the control socket (default: $NESTBOX_GATEWAY_DIR, else
    /// $XDG_STATE_HOME/nestbox/gateway, else ~/.local/state/nestbox/gateway).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Append one JSON line per decision and per inspected request to FILE.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Answer HOST with ADDR instead of asking DNS (`host=addr[,addr]`; the address is still
    /// checked). For pinning and for tests. Repeatable.
    #[arg(long, value_name = "HOST=ADDR")]
    resolve: Vec<String>,
    /// Worker threads (default: the number of CPUs, at most 4).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// How often the policy and secret files are checked for changes.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1s")]
    poll: Duration,
}

#[derive(Debug, Subcommand)]
enum GatewayAction {
    /// What the running gateway has loaded: generation, rules, credentials (names), the last
    /// reload's error if it was refused, registered cells, connections.
    Status {
        /// State directory of the gateway to ask.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reload the policy now (as SIGHUP does) and print the status.
    Reload {
        /// State directory of the gateway to ask.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print the gateway's CA certificate (PEM), creating the CA if there is none yet.
    Ca {
        /// State directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

/// Runs `nestbox gateway ...`; returns the exit code.
pub fn run(args: GatewayArgs) -> i32 {
    match args.action {
        Some(GatewayAction::Status { dir, json }) => status(dir, json, false),
        Some(GatewayAction::Reload { dir }) => status(dir, false, true),
        Some(GatewayAction::Ca { dir }) => ca(dir),
        None => serve_cmd(args.serve),
    }
}

fn serve_cmd(args: ServeArgs) -> i32 {
    let Some(policy) = args.policy else {
        say_error("nestbox gateway needs --policy FILE (or a subcommand: status, reload, ca)");
        return 2;
    };
    let mut hosts = StaticHosts::default();
    for entry in &args.resolve {
        if let Err(e) = hosts.add(entry) {
            say_error(format!("--resolve {e}"));
            return 2;
        }
    }
    let audit = match &args.audit {
        Some(p) => match AuditLog::open(p) {
            Ok(a) => Some(a),
            Err(e) => {
                say_error(format!("--audit {}: {e}", p.display()));
                return 1;
            }
        },
        None => None,
    };
    let listener = match TcpListener::bind(args.listen) {
        Ok(l) => l,
        Err(e) => {
            say_error(format!("--listen {}: {e}", args.listen));
            return 1;
        }
    };
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .min(4)
    });
    let config = GatewayConfig {
        policy,
        state_dir: args.dir.unwrap_or_else(default_state_dir),
        hosts,
        audit,
        limits: Limits::default(),
        workers,
        poll: args.poll,
        ready: None,
    };
    match serve(listener, config) {
        Ok(()) => 0,
        Err(e) => {
            say_error(format!("gateway: {e}"));
            1
        }
    }
}

fn status(dir: Option<PathBuf>, as_json: bool, reload: bool) -> i32 {
    let dir = dir.unwrap_or_else(default_state_dir);
    let op = if reload { "reload" } else { "status" };
    let v = match request(&dir, &json!({ "op": op })) {
        Ok(v) => v,
        Err(e) => {
            say_error(e);
            return 1;
        }
    };
    if as_json {
        println!("{v}");
        return 0;
    }
    print!("{}", human_status(&v));
    0
}

fn human_status(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let list = |k: &str| -> String {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    let mut out = format!(
        "gateway on {} (pid {}), state {}\npolicy {}: generation {} loaded {}\n  rules: {}\n  credentials: {}\n",
        s("listen"),
        v.get("pid").and_then(Value::as_u64).unwrap_or(0),
        s("state_dir"),
        s("policy"),
        v.get("generation").and_then(Value::as_u64).unwrap_or(0),
        s("loaded_at"),
        list("rules"),
        list("credentials"),
    );
    if let Some(w) = v.get("warnings").and_then(Value::as_array) {
        for w in w.iter().filter_map(Value::as_str) {
            out.push_str(&format!("  warning: {w}\n"));
        }
    }
    if let Some(err) = v.pointer("/reload/last_error").filter(|e| !e.is_null()) {
        out.push_str(&format!(
            "last reload REFUSED at {} (the generation above stays in force):\n  {}\n",
            err.get("time").and_then(Value::as_str).unwrap_or("?"),
            err.get("error")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .replace('\n', "\n  ")
        ));
    }
    let cells = v
        .get("cells")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    out.push_str(&format!("cells: {}\n", cells.len()));
    for c in cells {
        out.push_str(&format!(
            "  {} (step {}) since {}, credentials: {}\n",
            c.get("name").and_then(Value::as_str).unwrap_or("?"),
            c.get("id").and_then(Value::as_str).unwrap_or("?"),
            c.get("since").and_then(Value::as_str).unwrap_or("?"),
            c.get("credentials")
                .and_then(Value::as_array)
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default(),
        ));
    }
    out.push_str(&format!(
        "connections: {} open, {} since start\n",
        v.pointer("/connections/open")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        v.pointer("/connections/total")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    ));
    out
}

fn ca(dir: Option<PathBuf>) -> i32 {
    let dir = dir.unwrap_or_else(default_state_dir);
    match CertAuthority::load_or_create(&dir) {
        Ok(ca) => {
            print!("{}", ca.cert_pem());
            eprintln!(
                "nestbox gateway: CA certificate {}",
                cert_path(&dir).display()
            );
            0
        }
        Err(e) => {
            say_error(e);
            1
        }
    }
}
