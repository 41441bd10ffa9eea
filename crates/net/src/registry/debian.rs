//! apt sources: asked of `apt-get indextargets` (which reports every repository apt would
//! fetch), or read from `sources.list`, `sources.list.d/*.list` and deb822 `*.sources` files.

use super::{Discovery, Sources, read};

pub(super) fn discover(d: &Discovery) -> Sources {
    let mut s = Sources::default();
    if let Some(out) = d.run("apt-get", &["indextargets", "--format", "$(REPO_URI)"]) {
        let mut seen: Vec<&str> = Vec::new();
        for uri in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !seen.contains(&uri) {
                seen.push(uri);
                s.add(uri, "apt-get indextargets");
                s.replaces_default = true;
            }
        }
        if !seen.is_empty() {
            s.notes.push("asked `apt-get indextargets`".into());
            return s;
        }
    }
    let list = d.system_path("/etc/apt/sources.list");
    if let Some(text) = read(&list) {
        one_line_format(&mut s, &text, &list.display().to_string());
    }
    let dir = d.system_path("/etc/apt/sources.list.d");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        let Some(text) = read(&path) else { continue };
        let via = path.display().to_string();
        match path.extension().and_then(|e| e.to_str()) {
            Some("list") => one_line_format(&mut s, &text, &via),
            Some("sources") => deb822_format(&mut s, &text, &via),
            _ => {}
        }
    }
    s
}

/// `deb [ options ] uri suite [component...]`, also `deb-src`.
fn one_line_format(s: &mut Sources, text: &str, via: &str) {
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut rest = match line.split_once(char::is_whitespace) {
            Some(("deb" | "deb-src", rest)) => rest.trim_start(),
            _ => continue,
        };
        if rest.starts_with('[') {
            match rest.find(']') {
                Some(end) => rest = rest[end + 1..].trim_start(),
                None => continue,
            }
        }
        if let Some(uri) = rest.split_whitespace().next() {
            s.add(uri, via.to_string());
            s.replaces_default = true;
        }
    }
}

/// deb822 paragraphs: `URIs:` holds one or more URIs; `Enabled: no` turns a paragraph off.
fn deb822_format(s: &mut Sources, text: &str, via: &str) {
    for paragraph in text.split("\n\n") {
        let mut uris = Vec::new();
        let mut enabled = true;
        for line in paragraph.lines() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            match key.trim().to_ascii_lowercase().as_str() {
                "uris" => uris.extend(value.split_whitespace().map(str::to_string)),
                "enabled" => enabled = !value.trim().eq_ignore_ascii_case("no"),
                _ => {}
            }
        }
        if enabled {
            for uri in uris {
                s.add(&uri, via.to_string());
                s.replaces_default = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_source_formats_are_read() {
        let root = tempfile::tempdir().unwrap();
        let apt = root.path().join("etc/apt");
        std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
        std::fs::write(
            apt.join("sources.list"),
            "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.corp.example/debian bookworm main\n\
             deb-src https://src.corp.example/debian bookworm main # trailing\n",
        )
        .unwrap();
        std::fs::write(
            apt.join("sources.list.d/extra.sources"),
            "Types: deb\nURIs: http://a.example/debian http://b.example:8080/debian\nSuites: x\n\n\
             Types: deb\nURIs: http://off.example/\nEnabled: no\n",
        )
        .unwrap();
        std::fs::write(
            apt.join("sources.list.d/old.list.disabled"),
            "deb http://no.example/ x main\n",
        )
        .unwrap();
        let d = Discovery::offline().with_root(root.path());
        let s = discover(&d);
        let urls: Vec<&str> = s.urls.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://mirror.corp.example/debian",
                "https://src.corp.example/debian",
                "http://a.example/debian",
                "http://b.example:8080/debian"
            ]
        );
        assert!(s.replaces_default);
    }
}
