//! TLS for both listeners (`--tls-cert`, `--tls-key`): rustls with the ring provider.
//! With TLS on, a listener speaks TLS from the first byte (Faktory's `tcp+tls://`), then the
//! same protocol as without it.

use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::{Error as PemError, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use tokio_rustls::TlsAcceptor;

/// The server configurations of one certificate: for the TCP protocol (no ALPN) and for
/// HTTP (ALPN `http/1.1`, the only HTTP version served).
#[derive(Debug, Clone)]
pub struct Tls {
    pub tcp: Arc<rustls::ServerConfig>,
    pub http: Arc<rustls::ServerConfig>,
    /// How this node connects to another's peer listener (`cluster::link`): the nodes of
    /// a cluster share the certificate, so the peer's must chain to one of the
    /// certificates of this node's own chain.
    pub peer: Arc<rustls::ClientConfig>,
}

/// Read a PEM certificate chain and its private key. Every error names the file and what
/// is wrong with it, in one line.
pub fn load(cert: &Path, key: &Path) -> Result<Tls, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: no PEM CERTIFICATE block found",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| match e {
        PemError::NoItemsFound => format!(
            "--tls-key {}: no PEM PRIVATE KEY block found (PKCS#8, PKCS#1 or SEC1)",
            key.display()
        ),
        e => format!("--tls-key {}: {e}", key.display()),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in &certs {
        roots
            .add(c.clone())
            .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    }
    let peer = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            format!(
                "--tls-cert {} / --tls-key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    let mut http = tcp.clone();
    http.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        tcp: Arc::new(tcp),
        http: Arc::new(http),
        peer: Arc::new(peer),
    })
}
