//! TLS towards servers: one crypto provider (aws-lc-rs), the system's roots plus the policy's
//! extra bundles, and certificate verification always on.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The crypto provider every gateway TLS configuration uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The roots upstream servers are verified against, and the same as PEM for the step's bundle
/// (extra bundles only: the system's roots are added by the launcher from the system file).
pub struct UpstreamTrust {
    /// System roots plus extras.
    pub roots: Arc<RootCertStore>,
    /// The extra bundles' certificates, PEM.
    pub extra_pem: String,
    /// How many system roots were loaded (for the log).
    pub system_count: usize,
}

/// Loads the system roots and the PEM files in `extra`. An unreadable extra file is an error; a
/// system without roots is not (the extras may be all a test needs), but is reported.
pub fn upstream_trust(extra: &[impl AsRef<Path>]) -> Result<UpstreamTrust, String> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let mut system_count = 0;
    for cert in native.certs {
        if roots.add(cert).is_ok() {
            system_count += 1;
        }
    }
    let mut extra_pem = String::new();
    for path in extra {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(text.as_bytes()) {
            let cert = cert.map_err(|e| format!("upstream_ca {}: {e:?}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
            n += 1;
        }
        if n == 0 {
            return Err(format!(
                "upstream_ca {}: no PEM certificate in the file",
                path.display()
            ));
        }
        extra_pem.push_str(&text);
        if !extra_pem.ends_with('\n') {
            extra_pem.push('\n');
        }
    }
    Ok(UpstreamTrust {
        roots: Arc::new(roots),
        extra_pem,
        system_count,
    })
}

/// A client configuration verifying servers against `roots`, offering HTTP/2 when `http2`.
pub fn client_config(roots: Arc<RootCertStore>, http2: bool) -> Result<Arc<ClientConfig>, String> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(config))
}
