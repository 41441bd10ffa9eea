//! Which host paths a container can reach, computed from the container the engine actually
//! created (its inspect), not from the configuration that asked for it.
//!
//! The rules:
//!
//! 1. Every `HostConfig.Binds` entry whose source is a host path: it starts with `/`, `~`,
//!    `./`, `../` (or is `.` or `..`), or with a drive letter (`C:\`, `C:/`).
//! 2. Every `HostConfig.Mounts` entry of type `bind`.
//! 3. Every **named volume** (a `Binds` source that is not a host path, a `Mounts` entry of
//!    type `volume`, or a runtime mount of type `volume`) whose volume, inspected through the
//!    API, is a host path in disguise: driver `local` with `o` containing `bind` and a
//!    `device`. A prefix test on `myvol:/data` cannot see that `myvol` is `/home/me`; the
//!    container's own inspect cannot either (it shows the volume's mountpoint under the
//!    engine's data directory, not the device), so each volume is inspected.
//! 4. The mounts of every container named in `HostConfig.VolumesFrom`, by the same rules.
//! 5. Runtime `Mounts` of type `bind` not already counted (engines add some).
//!
//! A volume that cannot be inspected counts as exposed, with a note: when in doubt, the
//! answer that keeps approvals on.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, MountType};

use crate::backend::{ExposedPath, ExposureSource, HostExposure};

/// True when a bind source names a host path rather than a volume.
pub fn is_host_path(source: &str) -> bool {
    let s = source.trim();
    if s.is_empty() {
        return false;
    }
    let b = s.as_bytes();
    s.starts_with('/')
        || s.starts_with('~')
        || s.starts_with("./")
        || s.starts_with("../")
        || s == "."
        || s == ".."
        || (b.len() >= 3
            && b[0].is_ascii_alphabetic()
            && b[1] == b':'
            && matches!(b[2], b'\\' | b'/'))
}

/// A `Binds` entry split into source, target and options. A drive letter's colon is part of
/// the source.
pub fn parse_bind(spec: &str) -> (String, String, String) {
    let b = spec.as_bytes();
    let skip = if b.len() >= 3
        && b[0].is_ascii_alphabetic()
        && b[1] == b':'
        && matches!(b[2], b'\\' | b'/')
    {
        2
    } else {
        0
    };
    let rest = &spec[skip..];
    let mut parts = rest.splitn(3, ':');
    let source = format!("{}{}", &spec[..skip], parts.next().unwrap_or_default());
    let target = parts.next().unwrap_or_default().to_string();
    let options = parts.next().unwrap_or_default().to_string();
    (source, target, options)
}

fn read_only_options(options: &str) -> bool {
    options.split(',').any(|o| o == "ro" || o == "readonly")
}

/// The host path behind a named volume, if its driver options bind one.
pub fn bound_device(driver: &str, options: &HashMap<String, String>) -> Option<String> {
    if driver != "local" {
        return None;
    }
    let binds = options
        .get("o")
        .is_some_and(|o| o.split(',').any(|x| x == "bind" || x == "rbind"));
    let device = options.get("device")?;
    binds.then(|| device.clone())
}

struct Collector<'d> {
    docker: &'d Docker,
    out: HostExposure,
}

impl Collector<'_> {
    fn add(&mut self, host: String, target: &str, read_only: bool, via: ExposureSource) {
        let dup = self
            .out
            .paths
            .iter()
            .any(|p| p.host == host && p.target == target);
        if !dup {
            self.out.paths.push(ExposedPath {
                host,
                target: target.to_string(),
                read_only,
                via,
            });
        }
    }

    async fn volume(&mut self, name: &str, target: &str, read_only: bool) {
        match self.docker.inspect_volume(name).await {
            Ok(v) => {
                if let Some(device) = bound_device(&v.driver, &v.options) {
                    self.add(
                        device,
                        target,
                        read_only,
                        ExposureSource::NamedVolume { name: name.into() },
                    );
                } else if v.driver != "local" {
                    self.out.notes.push(format!(
                        "volume {name} uses driver {}; its storage was not classified",
                        v.driver
                    ));
                }
            }
            Err(e) => {
                self.add(
                    format!("(volume {name})"),
                    target,
                    read_only,
                    ExposureSource::NamedVolume { name: name.into() },
                );
                self.out.notes.push(format!(
                    "volume {name} could not be inspected ({e}); counted as exposed"
                ));
            }
        }
    }

    async fn container(&mut self, c: &ContainerInspectResponse, from: Option<&str>) {
        let via = |default: ExposureSource| match from {
            Some(name) => ExposureSource::VolumesFrom {
                container: name.into(),
            },
            None => default,
        };
        let host = c.host_config.clone().unwrap_or_default();
        for spec in host.binds.unwrap_or_default() {
            let (source, target, options) = parse_bind(&spec);
            let ro = read_only_options(&options);
            if is_host_path(&source) {
                self.add(source, &target, ro, via(ExposureSource::Bind));
            } else if !source.is_empty() {
                self.volume(&source, &target, ro).await;
            }
        }
        for m in host.mounts.unwrap_or_default() {
            let target = m.target.clone().unwrap_or_default();
            let ro = m.read_only.unwrap_or(false);
            match (m.typ, m.source) {
                (Some(MountType::BIND), Some(source)) => {
                    self.add(source, &target, ro, via(ExposureSource::BindMount))
                }
                (Some(MountType::VOLUME), Some(source)) if !source.is_empty() => {
                    self.volume(&source, &target, ro).await
                }
                _ => {}
            }
        }
        for m in c.mounts.clone().unwrap_or_default() {
            let target = m.destination.clone().unwrap_or_default();
            let ro = m.rw == Some(false);
            match m.typ.as_deref() {
                Some("bind") => {
                    if let Some(source) = m.source {
                        self.add(source, &target, ro, via(ExposureSource::BindMount));
                    }
                }
                Some("volume") => {
                    if let Some(name) = m.name.filter(|n| !n.is_empty()) {
                        let known = self.out.paths.iter().any(|p| {
                            p.target == target
                                && matches!(&p.via, ExposureSource::NamedVolume { name: n } if *n == name)
                        });
                        if !known {
                            self.volume(&name, &target, ro).await;
                        }
                    }
                }
                _ => {}
            }
        }
        if from.is_none() {
            for other in host.volumes_from.unwrap_or_default() {
                let name = other.split(':').next().unwrap_or_default().to_string();
                match self.docker.inspect_container(&name, None).await {
                    Ok(inner) => Box::pin(self.container(&inner, Some(&name))).await,
                    Err(e) => {
                        self.add(
                            format!("(mounts of {name})"),
                            "*",
                            false,
                            ExposureSource::VolumesFrom {
                                container: name.clone(),
                            },
                        );
                        self.out.notes.push(format!(
                            "volumes-from {name} could not be inspected ({e}); counted as exposed"
                        ));
                    }
                }
            }
        }
        if host.privileged == Some(true) {
            self.add(
                "(all host devices)".into(),
                "/dev",
                false,
                via(ExposureSource::Bind),
            );
            self.out
                .notes
                .push("the container is privileged: host devices are reachable".into());
        }
    }
}

/// The host exposure of an inspected container.
pub async fn host_exposure(docker: &Docker, container: &ContainerInspectResponse) -> HostExposure {
    let mut c = Collector {
        docker,
        out: HostExposure::default(),
    };
    c.container(container, None).await;
    c.out.exposed = !c.out.paths.is_empty();
    c.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_prefixes_are_recognised() {
        for s in ["/srv", "~/x", "./a", "../b", ".", "..", "C:\\data", "d:/x"] {
            assert!(is_host_path(s), "{s}");
        }
        for s in ["myvol", "vol_1", "", "c:vol", "a/b"] {
            assert!(!is_host_path(s), "{s}");
        }
    }

    #[test]
    fn bind_specs_split_around_drive_letters() {
        assert_eq!(
            parse_bind("/a:/b:ro"),
            ("/a".into(), "/b".into(), "ro".into())
        );
        assert_eq!(
            parse_bind("C:\\x:/data"),
            ("C:\\x".into(), "/data".into(), String::new())
        );
        assert_eq!(
            parse_bind("vol:/d"),
            ("vol".into(), "/d".into(), String::new())
        );
    }

    #[test]
    fn only_local_bind_volumes_with_a_device_are_host_paths() {
        let opts = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(
            bound_device(
                "local",
                &opts(&[("type", "none"), ("o", "bind"), ("device", "/h")])
            ),
            Some("/h".into())
        );
        assert_eq!(
            bound_device("local", &opts(&[("o", "ro,bind"), ("device", "/h")])),
            Some("/h".into())
        );
        assert_eq!(
            bound_device("local", &opts(&[("type", "tmpfs"), ("device", "tmpfs")])),
            None
        );
        assert_eq!(bound_device("local", &opts(&[])), None);
    }
}
