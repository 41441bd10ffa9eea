//! Containers that are not contained: privileged mode, host namespaces, and bind mounts of the
//! host's root, home, system directories or container-engine socket (which is root on the host).

use super::super::Tier;
use super::super::command::{Invocation, basename};
use super::super::paths::{Reach, reach};
use super::super::word::Arg;
use super::Rule;

pub(crate) const PRIVILEGED: Rule = Rule {
    id: "container.privileged",
    tier: Tier::Approval,
    reason: "starts a container with host privileges (privileged mode, host namespaces or dangerous capabilities)",
};

pub(crate) const HOST_MOUNT: Rule = Rule {
    id: "container.host_mount",
    tier: Tier::Approval,
    reason: "mounts the host's root, home, system directories or container-engine socket into a container",
};

const ENGINES: &[&str] = &["docker", "podman", "nerdctl"];

/// Long options of `run`/`create`/`exec` that take no value (everything else does).
const BOOL_OPTIONS: &[&str] = &[
    "--rm",
    "--privileged",
    "--init",
    "--interactive",
    "--tty",
    "--detach",
    "--read-only",
    "--no-healthcheck",
    "--oom-kill-disable",
    "--publish-all",
    "--quiet",
    "--disable-content-trust",
    "--help",
    "--sig-proxy",
    "--replace",
    "--tls-verify",
    "--pull-always",
    "--no-hosts",
];

/// Short options of `run`/`create`/`exec` that take a value.
const SHORT_WITH_VALUE: &str = "aceghlmpuvw";

const DANGEROUS_CAPS: &[&str] = &[
    "all",
    "sys_admin",
    "sys_module",
    "sys_ptrace",
    "sys_rawio",
    "dac_read_search",
    "net_admin",
    "bpf",
];

/// Host paths whose mount hands over the host.
fn dangerous_source(src: &str) -> bool {
    let name = basename(src);
    if name.ends_with(".sock")
        && (name.contains("docker") || name.contains("podman") || name.contains("containerd"))
    {
        return true;
    }
    matches!(reach(Some(src)), Reach::Root | Reach::Home | Reach::System)
        || src.starts_with("/run")
        || src.starts_with("/var/run")
}

/// The option words of a `run`/`create`/`exec`, up to the image (or container) name.
fn options(args: &[Arg]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let Some(v) = args[i].value() else { break };
        if v == "--" || !v.starts_with('-') || v == "-" {
            break;
        }
        if let Some(long) = v.strip_prefix("--") {
            if let Some((name, value)) = long.split_once('=') {
                out.push((format!("--{name}"), Some(value.to_owned())));
                i += 1;
            } else if BOOL_OPTIONS.contains(&v) {
                out.push((v.to_owned(), None));
                i += 1;
            } else {
                out.push((
                    v.to_owned(),
                    args.get(i + 1).and_then(|a| a.value().map(str::to_owned)),
                ));
                i += 2;
            }
            continue;
        }
        let cluster: Vec<char> = v.chars().skip(1).collect();
        let mut step = 1;
        for (k, c) in cluster.iter().enumerate() {
            if SHORT_WITH_VALUE.contains(*c) {
                let rest: String = cluster[k + 1..].iter().collect();
                let rest = rest.strip_prefix('=').map(str::to_owned).unwrap_or(rest);
                let value = if rest.is_empty() {
                    step = 2;
                    args.get(i + 1).and_then(|a| a.value().map(str::to_owned))
                } else {
                    Some(rest)
                };
                out.push((format!("-{c}"), value));
                break;
            }
            out.push((format!("-{c}"), None));
        }
        i += step;
    }
    out
}

/// Checks docker, podman and nerdctl.
pub(crate) fn check(program: &str, inv: &Invocation, sink: &mut super::Sink) {
    if !ENGINES.contains(&program) {
        return;
    }
    let args = inv.args();
    // Skip the engine's global options (`-H host`, `--context x`) to the subcommand.
    let mut i = 0;
    while i < args.len() {
        match args[i].value() {
            Some(v) if v.starts_with('-') => {
                let takes = !v.contains('=')
                    && matches!(
                        v,
                        "-H" | "--host"
                            | "-c"
                            | "--context"
                            | "--config"
                            | "-l"
                            | "--log-level"
                            | "--url"
                            | "--connection"
                            | "--root"
                            | "--runroot"
                    );
                i += if takes { 2 } else { 1 };
            }
            _ => break,
        }
    }
    let mut sub = args.get(i).and_then(Arg::value);
    if sub == Some("container") {
        i += 1;
        sub = args.get(i).and_then(Arg::value);
    }
    if !matches!(sub, Some("run" | "create" | "exec")) {
        return;
    }
    let mut privileged = false;
    let mut mounts = false;
    for (name, value) in options(&args[i + 1..]) {
        let value = value.unwrap_or_default();
        match name.as_str() {
            "--privileged" => privileged = true,
            "--pid" | "--ipc" | "--userns" | "--uts" | "--cgroupns" if value == "host" => {
                privileged = true
            }
            "--net" | "--network" if value == "host" => privileged = true,
            "--cap-add" => {
                let cap = value.to_ascii_lowercase();
                let cap = cap.strip_prefix("cap_").unwrap_or(&cap);
                privileged |= DANGEROUS_CAPS.contains(&cap);
            }
            "--security-opt" => {
                privileged |= value.contains("unconfined")
                    || value == "label=disable"
                    || value == "label:disable";
            }
            "--device" => {
                privileged |=
                    super::super::paths::is_raw_device(value.split(':').next().unwrap_or(""))
            }
            "-v" | "--volume" => {
                let src = value.split(':').next().unwrap_or("");
                mounts |= dangerous_source(src);
            }
            "--mount" => {
                let bind = value.split(',').any(|kv| kv == "type=bind");
                let src = value.split(',').find_map(|kv| {
                    kv.strip_prefix("source=")
                        .or_else(|| kv.strip_prefix("src="))
                });
                mounts |= bind && src.is_some_and(dangerous_source);
            }
            _ => {}
        }
    }
    if privileged {
        sink.hit(&PRIVILEGED, &inv.site);
    }
    if mounts {
        sink.hit(&HOST_MOUNT, &inv.site);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::guard::Tier;

    #[test]
    fn privileged_containers_need_approval() {
        for cmd in [
            "docker run --privileged -it ubuntu",
            "podman run --pid=host alpine",
            "docker run --net host nginx",
            "docker run --cap-add SYS_ADMIN alpine",
            "docker run --security-opt seccomp=unconfined alpine",
            "docker container run --privileged alpine",
            "docker -H tcp://x:2375 run --privileged alpine",
        ] {
            assert_finds(cmd, "container.privileged", Tier::Approval);
        }
    }

    #[test]
    fn host_mounts_need_approval() {
        for cmd in [
            "docker run -v /:/host alpine",
            "docker run -v /var/run/docker.sock:/var/run/docker.sock docker",
            "docker run --volume=/etc:/etc:ro alpine",
            "docker run --mount type=bind,source=/,target=/host alpine",
            "docker run -v ~/.ssh:/root/.ssh alpine",
            "podman run -v \"$HOME\":/h alpine",
        ] {
            assert_finds(cmd, "container.host_mount", Tier::Approval);
        }
    }

    #[test]
    fn ordinary_containers_are_clean() {
        for cmd in [
            "docker run --rm alpine echo hi",
            "docker run --rm -v \"$PWD\":/src -w /src rust cargo test",
            "docker run -v ./data:/data -p 8080:80 nginx",
            "docker run --rm alpine sh -c 'echo --privileged'",
            "docker ps -a",
            "docker build -t x .",
        ] {
            assert_clean(cmd);
        }
    }
}
