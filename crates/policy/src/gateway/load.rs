//! Reading a gateway policy file. Like the worker policy: every error carries file, line and
//! column, and unknown keys are errors.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::glob::Glob;
use super::model::{
    Caller, CredentialEndpoint, CredentialSpec, GatewayPolicy, GatewayRule, GatewaySettings,
    HostEntry, SecretSource, TlsMode,
};
use super::validate::validate;
use crate::host::{HostPattern, HostRule, IpRange, PortSpec};
use crate::load::{Locator, PolicyError, check_env_name};
use crate::presets::find_preset;
use crate::units::parse_size;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    kind: Option<Spanned<String>>,
    gateway: Option<RawSettings>,
    #[serde(default)]
    rule: Vec<RawRule>,
    #[serde(default)]
    credential: Vec<RawCredential>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    openshell_placeholders: Option<bool>,
    max_body: Option<Spanned<String>>,
    #[serde(default)]
    upstream_ca: Vec<Spanned<String>>,
}

/// The caller keys, shared by rules (flattened) and credentials (`callers = [{...}]`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCaller {
    cell: Option<Spanned<String>>,
    program: Option<Spanned<String>>,
    descendants: Option<Spanned<bool>>,
    any: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Spanned<String>,
    cell: Option<Spanned<String>>,
    program: Option<Spanned<String>>,
    descendants: Option<Spanned<bool>>,
    any: Option<Spanned<bool>>,
    #[serde(default)]
    hosts: Vec<Spanned<String>>,
    #[serde(default)]
    presets: Vec<Spanned<String>>,
    ports: Option<Spanned<Vec<Spanned<i64>>>>,
    #[serde(default)]
    paths: Vec<Spanned<String>>,
    #[serde(default)]
    methods: Vec<Spanned<String>>,
    tls: Option<Spanned<String>>,
    http2: Option<Spanned<bool>>,
    #[serde(default)]
    addresses: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    name: Spanned<String>,
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
    #[serde(default)]
    endpoints: Vec<Spanned<RawEndpoint>>,
    #[serde(default)]
    callers: Vec<Spanned<RawCaller>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    host: Spanned<String>,
    port: Option<Spanned<i64>>,
    path: Option<Spanned<String>>,
}

/// Which kind of policy a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// A worker policy (`[fs]`, `[net]`, `[env]`, `[limits]`): what one step may touch.
    Worker,
    /// A gateway policy (`[[rule]]`, `[[credential]]`, `[gateway]`): who may reach where.
    Gateway,
}

/// Tells a gateway policy from a worker policy by its top-level keys: `kind = "gateway"`, or any
/// of `rule`, `credential`, `gateway`. Text that is not TOML counts as a worker policy (whose
/// parser then reports the syntax error with its position).
pub fn policy_kind(text: &str) -> PolicyKind {
    match text.parse::<toml::Table>() {
        Ok(table) => {
            let gateway = table.get("kind").and_then(|k| k.as_str()) == Some("gateway")
                || ["rule", "credential", "gateway"]
                    .iter()
                    .any(|k| table.contains_key(*k));
            if gateway {
                PolicyKind::Gateway
            } else {
                PolicyKind::Worker
            }
        }
        Err(_) => PolicyKind::Worker,
    }
}

/// Reads and validates a gateway policy file.
pub fn load_gateway_file(path: &Path) -> Result<GatewayPolicy, PolicyError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
        file: name.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read gateway policy file: {e}"),
    })?;
    parse_gateway_policy(&name, &text)
}

/// Parses and validates gateway policy text; `file` names it in errors. Relative paths
/// (`file =` of a credential, `upstream_ca`) are resolved against the file's directory.
pub fn parse_gateway_policy(file: &str, text: &str) -> Result<GatewayPolicy, PolicyError> {
    let loc = Locator::new(file, text);
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        loc.error(&span, e.message().trim().to_string())
    })?;
    if let Some(kind) = &raw.kind
        && kind.get_ref() != "gateway"
    {
        return Err(loc.error(
            &kind.span(),
            format!(
                "kind `{}`: a gateway policy says `kind = \"gateway\"` (a worker policy has no \
                 `kind` key)",
                kind.get_ref()
            ),
        ));
    }
    let base = Path::new(file).parent().map(Path::to_path_buf);
    let resolve = |p: &str| -> PathBuf {
        let p = PathBuf::from(p);
        match (&base, p.is_absolute()) {
            (Some(b), false) => b.join(p),
            _ => p,
        }
    };

    let mut policy = GatewayPolicy {
        file: file.to_string(),
        ..GatewayPolicy::default()
    };
    if let Some(s) = raw.gateway {
        policy.settings = settings(&loc, s, &resolve)?;
    }
    for r in raw.rule {
        let rule = rule(&loc, r)?;
        if let Some(prev) = policy.rules.iter().find(|p| p.name == rule.name) {
            return Err(err_at(
                &rule.origin,
                format!(
                    "rule.name: `{}` is already the name of the rule at {}; rule names must be \
                     unique (audit lines and messages refer to them)",
                    rule.name, prev.origin
                ),
            ));
        }
        policy.rules.push(rule);
    }
    for c in raw.credential {
        let cred = credential(&loc, c, &resolve)?;
        if let Some(prev) = policy.credential(&cred.name) {
            return Err(err_at(
                &cred.origin,
                format!(
                    "credential.name: `{}` is already defined at {}",
                    cred.name, prev.origin
                ),
            ));
        }
        policy.credentials.push(cred);
    }
    validate(&mut policy)?;
    Ok(policy)
}

/// An error at an origin (always a file position here).
pub(crate) fn err_at(origin: &crate::Origin, message: String) -> PolicyError {
    match origin {
        crate::Origin::File { file, line, column } => PolicyError {
            file: file.clone(),
            line: *line,
            column: *column,
            message,
        },
        other => PolicyError {
            file: other.to_string(),
            line: 0,
            column: 0,
            message,
        },
    }
}

fn settings(
    loc: &Locator<'_>,
    s: RawSettings,
    resolve: &dyn Fn(&str) -> PathBuf,
) -> Result<GatewaySettings, PolicyError> {
    let mut out = GatewaySettings::default();
    if let Some(v) = s.openshell_placeholders {
        out.openshell_placeholders = v;
    }
    if let Some(size) = s.max_body {
        out.max_body = parse_size(size.get_ref())
            .map_err(|m| loc.error(&size.span(), format!("gateway.max_body: {m}")))?;
        if out.max_body > 1 << 30 {
            return Err(loc.error(
                &size.span(),
                "gateway.max_body: at most 1GiB (the gateway holds the whole body in memory)",
            ));
        }
    }
    for ca in s.upstream_ca {
        if ca.get_ref().is_empty() {
            return Err(loc.error(&ca.span(), "gateway.upstream_ca: empty path"));
        }
        out.upstream_ca.push(resolve(ca.get_ref()));
    }
    Ok(out)
}

struct CallerKeys {
    cell: Option<Spanned<String>>,
    program: Option<Spanned<String>>,
    descendants: Option<Spanned<bool>>,
    any: Option<Spanned<bool>>,
}

/// The caller named by one set of keys; `at` is where to point when none is given.
fn caller(
    loc: &Locator<'_>,
    keys: CallerKeys,
    at: &Range<usize>,
    what: &str,
) -> Result<Caller, PolicyError> {
    let given = usize::from(keys.cell.is_some())
        + usize::from(keys.program.is_some())
        + usize::from(keys.any.is_some());
    if given != 1 {
        return Err(loc.error(
            at,
            format!(
                "{what}: name exactly one caller: `cell = \"NAME\"` (a step started by \
                 `nestbox run --gateway`), `program = \"/path/glob\"` (by its executable) or \
                 `any = true`"
            ),
        ));
    }
    if let Some(d) = &keys.descendants
        && keys.program.is_none()
    {
        return Err(loc.error(
            &d.span(),
            format!("{what}.descendants: only a `program` caller has descendants"),
        ));
    }
    if let Some(cell) = keys.cell {
        let g = Glob::new(cell.get_ref())
            .map_err(|m| loc.error(&cell.span(), format!("{what}.cell: {m}")))?;
        if cell.get_ref().contains('/') {
            return Err(loc.error(&cell.span(), format!("{what}.cell: a cell name has no `/`")));
        }
        return Ok(Caller::Cell(g));
    }
    if let Some(program) = keys.program {
        let text = program.get_ref();
        if !text.starts_with('/') {
            return Err(loc.error(
                &program.span(),
                format!(
                    "{what}.program: `{text}` is not an absolute path: a program is matched by \
                     the path of its executable (/proc/PID/exe), e.g. `/usr/bin/curl`"
                ),
            ));
        }
        let exe = Glob::new(text)
            .map_err(|m| loc.error(&program.span(), format!("{what}.program: {m}")))?;
        let descendants = keys.descendants.is_some_and(|d| *d.get_ref());
        return Ok(Caller::Program { exe, descendants });
    }
    match keys.any {
        Some(a) if *a.get_ref() => Ok(Caller::Any),
        Some(a) => Err(loc.error(
            &a.span(),
            format!("{what}.any: `any = false` names nobody; remove it and name a caller"),
        )),
        None => unreachable!("exactly one caller key was given"),
    }
}

fn rule(loc: &Locator<'_>, r: RawRule) -> Result<GatewayRule, PolicyError> {
    let name_span = r.name.span();
    let name = r.name.into_inner();
    if name.trim().is_empty() {
        return Err(loc.error(&name_span, "rule.name: empty name"));
    }
    let origin = loc.origin(&name_span);
    let caller = caller(
        loc,
        CallerKeys {
            cell: r.cell,
            program: r.program,
            descendants: r.descendants,
            any: r.any,
        },
        &name_span,
        &format!("rule `{name}`"),
    )?;
    let mut hosts = Vec::new();
    for h in &r.hosts {
        hosts.push(host_entry(loc, h, &format!("rule `{name}`.hosts"))?);
    }
    for p in &r.presets {
        let preset = find_preset(p.get_ref().trim())
            .map_err(|e| loc.error(&p.span(), format!("rule `{name}`.presets: {e}")))?;
        for text in preset.hosts.iter().chain(preset.fallback) {
            let parsed = HostRule::parse(text).map_err(|e| {
                loc.error(
                    &p.span(),
                    format!("rule `{name}`.presets: preset entry {e}"),
                )
            })?;
            hosts.push(HostEntry {
                pattern: parsed.pattern,
                text: (*text).to_string(),
                preset: Some(preset.name.to_string()),
            });
        }
    }
    if hosts.is_empty() {
        return Err(loc.error(
            &name_span,
            format!(
                "rule `{name}`: no destination: give `hosts = [\"api.example.com\"]` or \
                 `presets = [\"github\"]`"
            ),
        ));
    }
    let ports = match r.ports {
        None => vec![443],
        Some(list) => {
            let span = list.span();
            let list = list.into_inner();
            if list.is_empty() {
                return Err(loc.error(&span, format!("rule `{name}`.ports: empty list")));
            }
            let mut out = Vec::new();
            for p in list {
                out.push(port(loc, &p, &format!("rule `{name}`.ports"))?);
            }
            out
        }
    };
    let tls = match &r.tls {
        None => TlsMode::Passthrough,
        Some(t) => match t.get_ref().as_str() {
            "passthrough" => TlsMode::Passthrough,
            "inspect" => TlsMode::Inspect,
            other => {
                return Err(loc.error(
                    &t.span(),
                    format!(
                        "rule `{name}`.tls: `{other}`: expected `inspect` (terminate TLS, check \
                         requests, resolve placeholders) or `passthrough` (a byte tunnel)"
                    ),
                ));
            }
        },
    };
    let tls_origin = r
        .tls
        .as_ref()
        .map_or(origin.clone(), |t| loc.origin(&t.span()));
    if tls == TlsMode::Passthrough {
        let inside = r
            .paths
            .first()
            .map(|p| ("paths", p.span()))
            .or_else(|| r.methods.first().map(|m| ("methods", m.span())))
            .or_else(|| r.http2.as_ref().map(|h| ("http2", h.span())));
        if let Some((key, span)) = inside {
            return Err(loc.error(
                &span,
                format!(
                    "rule `{name}`.{key}: a passthrough tunnel cannot see requests; set \
                     `tls = \"inspect\"` to check {key}"
                ),
            ));
        }
    }
    let mut paths = Vec::new();
    for p in &r.paths {
        if !p.get_ref().starts_with('/') {
            return Err(loc.error(
                &p.span(),
                format!("rule `{name}`.paths: `{}` must start with `/`", p.get_ref()),
            ));
        }
        paths.push(
            Glob::new(p.get_ref())
                .map_err(|m| loc.error(&p.span(), format!("rule `{name}`.paths: {m}")))?,
        );
    }
    let mut methods = Vec::new();
    for m in &r.methods {
        let text = m.get_ref();
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
            return Err(loc.error(
                &m.span(),
                format!("rule `{name}`.methods: `{text}` is not an HTTP method"),
            ));
        }
        methods.push(text.to_ascii_uppercase());
    }
    let http2 = r.http2.as_ref().is_none_or(|h| *h.get_ref());
    let http2_origin = r
        .http2
        .as_ref()
        .map_or(origin.clone(), |h| loc.origin(&h.span()));
    let mut addresses = Vec::new();
    for a in &r.addresses {
        addresses.push(address(loc, a, &format!("rule `{name}`.addresses"))?);
    }
    Ok(GatewayRule {
        name,
        origin,
        caller,
        hosts,
        ports,
        paths,
        methods,
        tls,
        tls_origin,
        http2,
        http2_origin,
        addresses,
    })
}

fn host_entry(
    loc: &Locator<'_>,
    h: &Spanned<String>,
    what: &str,
) -> Result<HostEntry, PolicyError> {
    let parsed =
        HostRule::parse(h.get_ref()).map_err(|e| loc.error(&h.span(), format!("{what}: {e}")))?;
    if parsed.port != PortSpec::Default {
        return Err(loc.error(
            &h.span(),
            format!(
                "{what}: `{}`: write the host alone and the port in `ports` (or `port`)",
                h.get_ref()
            ),
        ));
    }
    Ok(HostEntry {
        pattern: parsed.pattern,
        text: h.get_ref().trim().to_string(),
        preset: None,
    })
}

fn host_pattern(
    loc: &Locator<'_>,
    h: &Spanned<String>,
    what: &str,
) -> Result<HostPattern, PolicyError> {
    host_entry(loc, h, what).map(|e| e.pattern)
}

fn port(loc: &Locator<'_>, p: &Spanned<i64>, what: &str) -> Result<u16, PolicyError> {
    u16::try_from(*p.get_ref())
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| {
            loc.error(
                &p.span(),
                format!("{what}: `{}` is not a TCP port (1-65535)", p.get_ref()),
            )
        })
}

fn address(loc: &Locator<'_>, a: &Spanned<String>, what: &str) -> Result<IpRange, PolicyError> {
    let text = a.get_ref().trim();
    let bad = |m: String| loc.error(&a.span(), format!("{what}: `{text}`: {m}"));
    let (addr, len) = match text.split_once('/') {
        Some((addr, len)) => (addr, Some(len)),
        None => (text, None),
    };
    let addr: std::net::IpAddr = addr
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| bad("not an IP address or CIDR range".into()))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .map_err(|_| bad(format!("`/{l}` is not a prefix length")))?,
        None => max,
    };
    IpRange::new(addr, len).map_err(bad)
}

fn credential(
    loc: &Locator<'_>,
    c: RawCredential,
    resolve: &dyn Fn(&str) -> PathBuf,
) -> Result<CredentialSpec, PolicyError> {
    let name_span = c.name.span();
    let name = c.name.into_inner();
    check_env_name(&name).map_err(|m| {
        loc.error(
            &name_span,
            format!("credential.name: {m} (the name goes into `nestbox:resolve:env:NAME`)"),
        )
    })?;
    let origin = loc.origin(&name_span);
    let what = format!("credential `{name}`");
    let source = match (c.env, c.file) {
        (Some(env), None) => {
            check_env_name(env.get_ref())
                .map_err(|m| loc.error(&env.span(), format!("{what}.env: {m}")))?;
            SecretSource::Env(env.into_inner())
        }
        (None, Some(file)) => {
            if file.get_ref().is_empty() {
                return Err(loc.error(&file.span(), format!("{what}.file: empty path")));
            }
            SecretSource::File(resolve(file.get_ref()))
        }
        _ => {
            return Err(loc.error(
                &name_span,
                format!(
                    "{what}: say where the secret comes from: exactly one of `env = \"VAR\"` \
                     (the gateway's environment) or `file = \"/path\"` (readable only by the \
                     gateway's user)"
                ),
            ));
        }
    };
    if c.endpoints.is_empty() {
        return Err(loc.error(
            &name_span,
            format!(
                "{what}: no endpoints: bind it with `endpoints = [{{ host = \"api.example.com\" \
                 }}]` (a credential goes only where it is bound)"
            ),
        ));
    }
    let mut endpoints = Vec::new();
    for e in c.endpoints {
        let e = e.into_inner();
        let host = host_pattern(loc, &e.host, &format!("{what}.endpoints.host"))?;
        let port = match &e.port {
            Some(p) => port(loc, p, &format!("{what}.endpoints.port"))?,
            None => 443,
        };
        let path = match &e.path {
            Some(p) => {
                if !p.get_ref().starts_with('/') {
                    return Err(loc.error(
                        &p.span(),
                        format!(
                            "{what}.endpoints.path: `{}` must start with `/`",
                            p.get_ref()
                        ),
                    ));
                }
                Glob::new(p.get_ref())
                    .map_err(|m| loc.error(&p.span(), format!("{what}.endpoints.path: {m}")))?
            }
            None => Glob::new("/**").expect("a valid glob"),
        };
        endpoints.push(CredentialEndpoint {
            host,
            host_text: e.host.get_ref().trim().to_string(),
            port,
            path,
        });
    }
    if c.callers.is_empty() {
        return Err(loc.error(
            &name_span,
            format!(
                "{what}: no callers: bind it with `callers = [{{ cell = \"worker\" }}]` (or a \
                 `program`, or `{{ any = true }}` to let every caller that may reach the \
                 endpoint use it)"
            ),
        ));
    }
    let mut callers = Vec::new();
    for k in c.callers {
        let span = k.span();
        let k = k.into_inner();
        callers.push(caller(
            loc,
            CallerKeys {
                cell: k.cell,
                program: k.program,
                descendants: k.descendants,
                any: k.any,
            },
            &span,
            &format!("{what}.callers"),
        )?);
    }
    Ok(CredentialSpec {
        name,
        origin,
        source,
        endpoints,
        callers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
kind = "gateway"
[gateway]
max_body = "1MiB"

[[rule]]
name = "model-api"
cell = "worker"
hosts = ["api.anthropic.com"]
tls = "inspect"
paths = ["/v1/**"]
methods = ["post", "GET"]

[[rule]]
name = "git"
program = "/usr/bin/git*"
descendants = true
presets = ["github"]

[[credential]]
name = "ANTHROPIC_API_KEY"
env = "REAL_KEY"
endpoints = [{ host = "api.anthropic.com", path = "/v1/**" }]
callers = [{ cell = "worker" }]
"#;

    #[test]
    fn reads_rules_credentials_and_settings() {
        let p = parse_gateway_policy("gw.toml", GOOD).unwrap();
        assert_eq!(p.settings.max_body, 1 << 20);
        assert_eq!(p.rules.len(), 2);
        assert_eq!(p.rules[0].methods, ["POST", "GET"]);
        assert_eq!(p.rules[0].tls, TlsMode::Inspect);
        assert_eq!(p.rules[1].tls, TlsMode::Passthrough);
        assert!(p.rules[1].hosts.iter().any(|h| h.text == "api.github.com"));
        assert!(matches!(
            p.rules[1].caller,
            Caller::Program {
                descendants: true,
                ..
            }
        ));
        let c = p.credential("ANTHROPIC_API_KEY").unwrap();
        assert_eq!(c.source, SecretSource::Env("REAL_KEY".into()));
        assert_eq!(c.endpoints[0].port, 443);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn kind_is_told_by_the_keys() {
        assert_eq!(policy_kind(GOOD), PolicyKind::Gateway);
        assert_eq!(policy_kind("[[rule]]\nname='x'"), PolicyKind::Gateway);
        assert_eq!(policy_kind("[fs]\nread=[]"), PolicyKind::Worker);
        assert_eq!(policy_kind("[fs"), PolicyKind::Worker);
    }

    fn error(text: &str) -> PolicyError {
        parse_gateway_policy("gw.toml", text).unwrap_err()
    }

    #[test]
    fn unknown_keys_are_errors_with_positions() {
        let e = error(
            "[[rule]]\nname = \"a\"\nany = true\nhosts = [\"x.example\"]\ntsl = \"inspect\"\n",
        );
        assert_eq!((e.line, e.column), (5, 1), "{e}");
        assert!(e.message.contains("tsl"), "{e}");
        let e = error("[[credential]]\nname = \"K\"\nenv = \"K\"\nsecret = \"x\"\n");
        assert!(e.message.contains("secret"), "{e}");
    }

    #[test]
    fn rules_name_exactly_one_caller() {
        let e = error("[[rule]]\nname = \"a\"\nhosts = [\"x.example\"]\n");
        assert!(e.message.contains("exactly one caller"), "{e}");
        assert_eq!(e.line, 2);
        let e =
            error("[[rule]]\nname = \"a\"\ncell = \"w\"\nany = true\nhosts = [\"x.example\"]\n");
        assert!(e.message.contains("exactly one caller"), "{e}");
        let e = error(
            "[[rule]]\nname = \"a\"\ncell = \"w\"\ndescendants = true\nhosts = [\"x.example\"]\n",
        );
        assert!(e.message.contains("only a `program`"), "{e}");
        let e = error("[[rule]]\nname = \"a\"\nprogram = \"curl\"\nhosts = [\"x.example\"]\n");
        assert!(e.message.contains("absolute path"), "{e}");
    }

    #[test]
    fn bad_values_point_at_the_value() {
        let e = error(
            "[[rule]]\nname = \"a\"\nany = true\nhosts = [\"x.example\"]\ntls = \"terminate\"\n",
        );
        assert_eq!((e.line, e.column), (5, 7), "{e}");
        let e = error("[[rule]]\nname = \"a\"\nany = true\nhosts = [\"x.example:443\"]\n");
        assert!(e.message.contains("ports"), "{e}");
        let e = error("[[rule]]\nname = \"a\"\nany = true\nhosts = [\"*\"]\n");
        assert!(e.message.contains("every host"), "{e}");
        let e = error(
            "[[rule]]\nname = \"a\"\nany = true\nhosts = [\"x.example\"]\npaths = [\"/v1\"]\n",
        );
        assert!(e.message.contains("passthrough tunnel cannot see"), "{e}");
        let e = error("[[rule]]\nname = \"a\"\nany = true\nhosts = [\"x.example\"]\nports = [0]\n");
        assert!(e.message.contains("not a TCP port"), "{e}");
        let e = error("[[rule]]\nname = \"a\"\nany = true\npresets = [\"pip\"]\n");
        assert!(e.message.contains("unknown preset"), "{e}");
        let e = error(
            "[[rule]]\nname = \"a\"\nany = true\nhosts = [\"x.example\"]\n[[rule]]\nname = \"a\"\nany = true\nhosts = [\"y.example\"]\n",
        );
        assert!(e.message.contains("already the name"), "{e}");
        assert_eq!(e.line, 6);
        let e = error("kind = \"worker\"\n");
        assert!(e.message.contains("kind `worker`"), "{e}");
    }

    #[test]
    fn credentials_need_a_source_endpoints_and_callers() {
        let e = error(
            "[[credential]]\nname = \"K\"\nendpoints = [{ host = \"a.example\" }]\ncallers = [{ any = true }]\n",
        );
        assert!(e.message.contains("exactly one of `env"), "{e}");
        let e = error("[[credential]]\nname = \"K\"\nenv = \"K\"\ncallers = [{ any = true }]\n");
        assert!(e.message.contains("no endpoints"), "{e}");
        let e = error(
            "[[credential]]\nname = \"K\"\nenv = \"K\"\nendpoints = [{ host = \"a.example\" }]\n",
        );
        assert!(e.message.contains("no callers"), "{e}");
        let e = error("[[credential]]\nname = \"1K\"\nenv = \"K\"\n");
        assert!(e.message.contains("not a valid environment"), "{e}");
        let e = error(
            "[[credential]]\nname = \"K\"\nenv = \"K\"\nendpoints = [{ host = \"a.example\", path = \"v1\" }]\ncallers = [{ any = true }]\n",
        );
        assert!(e.message.contains("must start with `/`"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_text_loads_or_fails_with_a_position_never_a_panic(
            text in "(\\[\\[rule\\]\\]\n|\\[\\[credential\\]\\]\n|\\[gateway\\]\n|name = \"[a-z]{0,3}\"\n|any = true\n|cell = \"[a-z*]{0,3}\"\n|program = \"/[a-z*/]{0,5}\"\n|hosts = \\[\"[a-z.*]{0,8}\"\\]\n|tls = \"[a-z]{0,8}\"\n|ports = \\[[0-9]{0,6}\\]\n|env = \"[A-Z]{0,3}\"\n|endpoints = \\[\\{ host = \"[a-z.]{0,6}\" \\}\\]\n|callers = \\[\\{ any = true \\}\\]\n|\\PC{0,10}){0,12}"
        ) {
            if let Err(e) = parse_gateway_policy("gw.toml", &text) {
                proptest::prop_assert!(e.line >= 1, "{}", e);
            }
        }
    }

    #[test]
    fn relative_secret_files_are_relative_to_the_policy() {
        let p = parse_gateway_policy(
            "/etc/nestbox/gw.toml",
            "[[credential]]\nname = \"K\"\nfile = \"secrets/k\"\nendpoints = [{ host = \"a.example\" }]\ncallers = [{ any = true }]\n",
        )
        .unwrap();
        assert_eq!(
            p.credentials[0].source,
            SecretSource::File("/etc/nestbox/secrets/k".into())
        );
    }
}
