//! Cargo sources: registries and source replacement from Cargo's config files. Cargo has no
//! stable command that prints its configuration, so the files are read as Cargo reads them:
//! `.cargo/config.toml` (or `.cargo/config`) in the working directory and each parent, then
//! `$CARGO_HOME/config.toml`.

use std::path::PathBuf;

use super::{Discovery, Sources, read};

pub(super) fn discover(d: &Discovery) -> Sources {
    let mut s = Sources::default();
    for (name, value) in &d.env {
        if name.starts_with("CARGO_REGISTRIES_") && name.ends_with("_INDEX") && !value.is_empty() {
            s.add(value, name.clone());
        }
    }
    for path in config_files(d) {
        let Some(text) = read(&path) else { continue };
        let table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                s.notes.push(format!(
                    "could not read {}: {}",
                    path.display(),
                    e.message()
                ));
                continue;
            }
        };
        let via = path.display().to_string();
        for (section, key) in [("source", "registry"), ("registries", "index")] {
            let Some(toml::Value::Table(entries)) = table.get(section) else {
                continue;
            };
            for (name, entry) in entries {
                if let Some(url) = entry.get(key).and_then(toml::Value::as_str) {
                    s.add(url, format!("{via}: {section}.{name}.{key}"));
                }
                for local in ["local-registry", "directory"] {
                    if entry.get(local).is_some() {
                        s.notes.push(format!(
                            "{via}: {section}.{name} is a local {local} (no network needed)"
                        ));
                    }
                }
            }
        }
    }
    s
}

fn config_files(d: &Discovery) -> Vec<PathBuf> {
    // CARGO_HOME's settings only; never a project's `.cargo/config.toml` (the repository the
    // step runs would choose its own hosts).
    let mut files = Vec::new();
    let cargo_home = d
        .var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| d.home_path(".cargo"));
    if let Some(home) = cargo_home {
        for name in ["config.toml", "config"] {
            let f = home.join(name);
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_replacement_and_registries_are_found() {
        let cargo_home = tempfile::tempdir().unwrap();
        std::fs::write(
            cargo_home.path().join("config.toml"),
            "[source.crates-io]\nreplace-with = \"corp\"\n\
             [source.corp]\nregistry = \"sparse+https://cargo.corp.example/index/\"\n\
             [source.vendored]\ndirectory = \"vendor\"\n\
             [registries.acme]\nindex = \"https://git.acme.example/index.git\"\n",
        )
        .unwrap();
        let d = Discovery::offline()
            .with_env("CARGO_HOME", cargo_home.path().to_str().unwrap())
            .with_env(
                "CARGO_REGISTRIES_OTHER_INDEX",
                "sparse+https://other.example/",
            );
        let s = discover(&d);
        let urls: Vec<&str> = s.urls.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(
            urls,
            [
                "sparse+https://other.example/",
                "sparse+https://cargo.corp.example/index/",
                "https://git.acme.example/index.git"
            ]
        );
        assert!(
            s.notes.iter().any(|n| n.contains("vendored")),
            "{:?}",
            s.notes
        );
    }
}
