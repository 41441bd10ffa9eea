//! npm registries: the default one and any per-scope registries.

use super::{Discovery, Sources, read};

pub(super) fn discover(d: &Discovery) -> Sources {
    let mut s = Sources::default();
    if let Some(out) = d.run("npm", &["config", "list", "--json"])
        && let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&out)
    {
        s.notes.push("asked `npm config list --json`".into());
        for (key, value) in &map {
            if (key == "registry" || key.ends_with(":registry"))
                && let Some(url) = value.as_str()
            {
                s.add(url, format!("npm config: {key}"));
                s.replaces_default |= key == "registry";
            }
        }
        return s;
    }
    for var in ["npm_config_registry", "NPM_CONFIG_REGISTRY"] {
        if let Some(url) = d.var(var) {
            s.add(url, var);
            s.replaces_default = true;
            break;
        }
    }
    // The user's and the system's settings; never a project's (the repository the step runs).
    let mut files = Vec::new();
    files.extend(d.home_path(".npmrc"));
    files.push(d.system_path("/etc/npmrc"));
    files.push(d.system_path("/usr/etc/npmrc"));
    for path in files {
        let Some(text) = read(&path) else { continue };
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with(['#', ';']) {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let key = key.trim();
            let value = value.trim().trim_matches(['"', '\'']);
            if value.contains("${") {
                s.notes.push(format!(
                    "skipped {key} in {}: it uses a variable",
                    path.display()
                ));
                continue;
            }
            if key == "registry" || key.ends_with(":registry") {
                s.add(value, format!("{}: {key}", path.display()));
                s.replaces_default |= key == "registry";
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npmrc_registries_and_scopes_are_read() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join(".npmrc"),
            "registry=https://npm.corp.example/\n@acme:registry = \"https://npm.acme.example:8443/\"\n//npm.corp.example/:_authToken=${TOKEN}\n",
        )
        .unwrap();
        let d = Discovery::offline().with_home(home.path());
        let s = discover(&d);
        let urls: Vec<&str> = s.urls.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://npm.corp.example/",
                "https://npm.acme.example:8443/"
            ]
        );
        assert!(s.replaces_default);
    }

    #[test]
    fn the_environment_names_the_registry() {
        let d = Discovery::offline().with_env("npm_config_registry", "https://r.example/");
        let s = discover(&d);
        assert_eq!(s.urls[0].1, "npm_config_registry");
    }
}
