//! The gateway's certificate authority: generated on first start in the state directory
//! (`ca.pem`, `ca.key` mode 0600), and the leaf certificates it issues, one per destination
//! host, cached in memory.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// File names in the state directory.
const CERT_FILE: &str = "ca.pem";
const KEY_FILE: &str = "ca.key";
const SUBJECT_FILE: &str = "ca.subject";
const LOCK_FILE: &str = "ca.lock";

/// How many hosts' server configurations are kept; beyond that the cache starts over.
const MAX_LEAVES: usize = 1024;
/// Leaves are reissued after this long (they are valid for twice as long).
const LEAF_REFRESH: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why the CA could not be loaded or created.
#[derive(Debug, thiserror::Error)]
#[error("gateway CA in {dir}: {reason}")]
pub struct CaError {
    /// The state directory.
    pub dir: String,
    /// What went wrong.
    pub reason: String,
}

/// Server configurations by (host, HTTP/2 offered), with when they were made.
type LeafCache = HashMap<(String, bool), (Instant, Arc<ServerConfig>)>;

/// The CA, able to issue leaf certificates.
pub struct CertAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaf_key: KeyPair,
    leaves: Mutex<LeafCache>,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertAuthority")
    }
}

fn ca_params(subject: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, subject);
    dn.push(DnType::OrganizationName, "nestbox");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// The CA certificate's path in `dir`.
pub fn cert_path(dir: &Path) -> PathBuf {
    dir.join(CERT_FILE)
}

impl CertAuthority {
    /// Loads the CA from `dir`, or creates it (directory mode 0700, key mode 0600).
    pub fn load_or_create(dir: &Path) -> Result<CertAuthority, CaError> {
        let fail = |reason: String| CaError {
            dir: dir.display().to_string(),
            reason,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(format!("cannot create the directory: {e}")))?;
        // One creator at a time (the gateway starting, `nestbox gateway ca`): the lock is held
        // until this function returns.
        let _lock = lock(&dir.join(LOCK_FILE)).map_err(|e| fail(format!("locking: {e}")))?;
        let (cert_p, key_p, subj_p) = (
            dir.join(CERT_FILE),
            dir.join(KEY_FILE),
            dir.join(SUBJECT_FILE),
        );
        let (subject, key, cert_pem) = if key_p.exists() {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(&key_p).map_err(|e| fail(e.to_string()))?;
            if meta.mode() & 0o077 != 0 {
                return Err(fail(format!(
                    "{} is readable by others (mode {:o}): chmod 600 it, or remove the CA files \
                     to make a new one",
                    key_p.display(),
                    meta.mode() & 0o777
                )));
            }
            let key_pem = std::fs::read_to_string(&key_p).map_err(|e| fail(e.to_string()))?;
            let key = KeyPair::from_pem(&key_pem)
                .map_err(|e| fail(format!("{}: {e}", key_p.display())))?;
            let subject = std::fs::read_to_string(&subj_p)
                .map_err(|e| fail(format!("{}: {e}", subj_p.display())))?
                .trim()
                .to_string();
            let cert_pem = std::fs::read_to_string(&cert_p)
                .map_err(|e| fail(format!("{}: {e}", cert_p.display())))?;
            (subject, key, cert_pem)
        } else {
            let key = KeyPair::generate().map_err(|e| fail(format!("key generation: {e}")))?;
            let subject = format!("nestbox gateway CA {}", crate::gateway::random_hex(4));
            let mut params = ca_params(&subject);
            params.not_before = now() - time::Duration::days(1);
            params.not_after = now() + time::Duration::days(3650);
            let cert = params
                .self_signed(&key)
                .map_err(|e| fail(format!("signing the CA: {e}")))?;
            let cert_pem = cert.pem();
            write_private(&key_p, key.serialize_pem().as_bytes())
                .map_err(|e| fail(format!("{}: {e}", key_p.display())))?;
            std::fs::write(&subj_p, format!("{subject}\n")).map_err(|e| fail(e.to_string()))?;
            std::fs::write(&cert_p, &cert_pem).map_err(|e| fail(e.to_string()))?;
            (subject, key, cert_pem)
        };
        let cert_der = rustls_pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| fail(format!("{}: {e:?}", cert_p.display())))?;
        let issuer = Issuer::new(ca_params(&subject), key);
        let leaf_key = KeyPair::generate().map_err(|e| fail(format!("key generation: {e}")))?;
        Ok(CertAuthority {
            issuer,
            cert_pem,
            cert_der,
            leaf_key,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The server configuration presenting a leaf for `host` (a name or an address literal),
    /// offering HTTP/2 by ALPN when `http2`.
    pub fn server_config(
        &self,
        host: &nestbox_policy::Host,
        http2: bool,
    ) -> Result<Arc<ServerConfig>, String> {
        let key = (host.to_string(), http2);
        if let Ok(cache) = self.leaves.lock()
            && let Some((made, config)) = cache.get(&key)
            && made.elapsed() < LEAF_REFRESH
        {
            return Ok(config.clone());
        }
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match host {
            nestbox_policy::Host::Name(n) => SanType::DnsName(
                n.as_str()
                    .try_into()
                    .map_err(|e| format!("leaf for {n}: {e}"))?,
            ),
            nestbox_policy::Host::Addr(a) => SanType::IpAddress(*a),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.to_string());
        params.distinguished_name = dn;
        params.not_before = now() - time::Duration::hours(1);
        params.not_after = now() + time::Duration::days(14);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| format!("issuing a certificate for {host}: {e}"))?;
        let chain = vec![leaf.der().clone(), self.cert_der.clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(super::tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("server configuration for {host}: {e}"))?;
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let config = Arc::new(config);
        if let Ok(mut cache) = self.leaves.lock() {
            if cache.len() >= MAX_LEAVES {
                cache.clear();
            }
            cache.insert((host.to_string(), http2), (Instant::now(), config.clone()));
        }
        Ok(config)
    }
}

/// Takes an exclusive lock on `path` (created if missing), released when the file is closed.
fn lock(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)?;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Creates `path` with mode 0600 and writes `bytes` (fails if it exists).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_ca_is_made_once_with_a_private_key_and_issues_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("gw");
        let ca = CertAuthority::load_or_create(&state).unwrap();
        let meta = std::fs::metadata(state.join(KEY_FILE)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
        let pem = ca.cert_pem().to_string();
        let again = CertAuthority::load_or_create(&state).unwrap();
        assert_eq!(again.cert_pem(), pem);
        // creators racing each other agree on one CA
        let racing = tempfile::tempdir().unwrap();
        let pems: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        CertAuthority::load_or_create(racing.path())
                            .unwrap()
                            .cert_pem()
                            .to_string()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(pems.iter().all(|p| *p == pems[0]));
        let host = nestbox_policy::Host::parse("api.example.com").unwrap();
        let c1 = again.server_config(&host, true).unwrap();
        let c2 = again.server_config(&host, true).unwrap();
        assert!(Arc::ptr_eq(&c1, &c2));
        assert_eq!(c1.alpn_protocols[0], b"h2");
    }
}
