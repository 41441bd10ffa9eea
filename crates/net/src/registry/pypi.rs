//! Python package indexes: what pip (and uv) would download from.

use super::{Discovery, Sources, read, split_urls};

/// Keys naming URLs pip fetches from, and whether the key replaces the default index.
const PIP_KEYS: &[(&str, bool)] = &[
    ("index-url", true),
    ("extra-index-url", false),
    ("find-links", false),
];

pub(super) fn discover(d: &Discovery) -> Sources {
    let mut s = Sources::default();
    // uv reads only its own variables; they add hosts but never stop pip from using PyPI
    for var in [
        "UV_DEFAULT_INDEX",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_INDEX",
    ] {
        if let Some(value) = d.var(var) {
            for item in split_urls(value) {
                // UV_INDEX items may be `name=url`
                let url = item.split_once('=').map_or(item, |(_, u)| u);
                s.add(url, var);
            }
        }
    }
    let asked = [
        ("pip", &["config", "list"][..]),
        ("pip3", &["config", "list"][..]),
        // -I: isolated mode, so neither the directory it runs in nor PYTHON* variables can
        // put other code on the import path.
        ("python3", &["-I", "-m", "pip", "config", "list"][..]),
    ]
    .iter()
    .find_map(|(program, args)| d.run(program, args).map(|out| (*program, out)));
    match asked {
        Some((program, out)) => {
            s.notes.push(format!(
                "asked `{program} config list` (includes PIP_* variables)"
            ));
            for line in out.lines() {
                if let Some((key, value)) = parse_config_list_line(line) {
                    add_key(&mut s, &key, &value, "pip config list");
                }
            }
        }
        None => {
            for (var, key) in [
                ("PIP_INDEX_URL", "index-url"),
                ("PIP_EXTRA_INDEX_URL", "extra-index-url"),
                ("PIP_FIND_LINKS", "find-links"),
            ] {
                if let Some(value) = d.var(var) {
                    add_key(&mut s, key, value, var);
                }
            }
            for path in config_files(d) {
                if let Some(text) = read(&path) {
                    for (key, value) in parse_ini(&text) {
                        add_key(&mut s, &key, &value, &path.display().to_string());
                    }
                }
            }
        }
    }
    s
}

fn add_key(s: &mut Sources, key: &str, value: &str, via: &str) {
    let key = key.replace('_', "-");
    let Some((_, replaces)) = PIP_KEYS.iter().find(|(k, _)| *k == key) else {
        return;
    };
    for url in split_urls(value) {
        s.add(url, format!("{via}: {key}"));
        s.replaces_default |= replaces;
    }
}

/// `global.index-url='https://...'` -> (`index-url`, `https://...`).
fn parse_config_list_line(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once('=')?;
    let key = name.rsplit('.').next()?.trim();
    let value = value.trim();
    let value = value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
        .unwrap_or(value);
    Some((key.to_string(), value.to_string()))
}

/// pip's configuration files, in the order pip reads them (later wins in pip; here all count).
fn config_files(d: &Discovery) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    if let Some(f) = d.var("PIP_CONFIG_FILE")
        && f != "os.devnull"
    {
        files.push(f.into());
    }
    files.push(d.system_path("/etc/xdg/pip/pip.conf"));
    files.push(d.system_path("/etc/pip.conf"));
    files.extend(d.home_path(".pip/pip.conf"));
    files.extend(d.home_path(".config/pip/pip.conf"));
    if let Some(venv) = d.var("VIRTUAL_ENV") {
        files.push(std::path::Path::new(venv).join("pip.conf"));
    }
    files
}

/// A small INI reader: `key = value` lines, indented continuation lines appended to the value,
/// `#` and `;` comments. Sections are ignored (pip reads `[global]`, `[install]`, `[download]`).
fn parse_ini(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_end();
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with(['#', ';']) || trimmed.starts_with('[') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = out.last_mut() {
                value.push(' ');
                value.push_str(trimmed);
            }
            continue;
        }
        if let Some((k, v)) = trimmed.split_once(['=', ':']) {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_list_lines_parse() {
        assert_eq!(
            parse_config_list_line("global.index-url='https://m.example/simple'"),
            Some(("index-url".into(), "https://m.example/simple".into()))
        );
        assert_eq!(
            parse_config_list_line(":env:.extra-index-url='https://a.example https://b.example'")
                .unwrap()
                .1,
            "https://a.example https://b.example"
        );
    }

    #[test]
    fn ini_continuations_join() {
        let text = "[global]\nindex-url = https://m.example/simple\nextra-index-url =\n    https://a.example\n    https://b.example\n# x = y\n";
        let kv = parse_ini(text);
        assert_eq!(
            kv[0],
            ("index-url".into(), "https://m.example/simple".into())
        );
        assert_eq!(kv[1].0, "extra-index-url");
        assert_eq!(split_urls(&kv[1].1).count(), 2);
    }

    #[test]
    fn pip_conf_mirror_replaces_pypi_org() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/pip.conf"),
            "[global]\nindex-url = https://pypi.mirror.corp/simple\nfind-links = /opt/wheels\n",
        )
        .unwrap();
        let d = Discovery::offline().with_root(dir.path());
        let s = discover(&d);
        assert!(s.replaces_default);
        assert_eq!(s.urls[0].0, "https://pypi.mirror.corp/simple");
        assert!(
            s.urls[0].1.ends_with("etc/pip.conf: index-url"),
            "{}",
            s.urls[0].1
        );
    }

    #[test]
    fn find_links_alone_keep_the_default_index() {
        let d = Discovery::offline().with_env("PIP_FIND_LINKS", "/opt/wheels");
        let s = discover(&d);
        assert!(!s.replaces_default);
    }
}
