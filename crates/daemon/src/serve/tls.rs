//! HTTPS on the public listener (`[tls]`): rustls with the workspace's provider (ring),
//! TLS 1.3 and 1.2 only, ALPN `h2` and `http/1.1`, and a certificate that is replaced
//! without a restart.
//!
//! The certificate and key come from two PEM files. A handshake takes whatever
//! [`CertFiles`] holds at that moment, so a reload changes nothing for connections
//! already open and drops none. The files are looked at every `reload_interval_ms`
//! (their size and modification time) and on SIGHUP; a new pair is taken only whole
//! and consistent (the chain parses, the key parses and is the leaf's): a renewal
//! caught half-written, a garbled file or a key that does not match keeps the pair in
//! force, with an `error` line and `tlogd_tls_certificate_reloads_total{result="error"}`,
//! and is tried again at the next look.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::TlsConfig;

/// Why a certificate and key could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or held no PEM of the kind wanted.
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// The key is not one rustls signs with, or not the certificate's.
    #[error("{path}: {what}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// The TLS configuration itself (protocol versions).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate a handshake is answered with, and the files it comes from.
#[derive(Debug)]
pub struct CertFiles {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The two files' (size, modification time) when `current` was read from them.
    seen: Mutex<[Option<(u64, SystemTime)>; 2]>,
}

impl CertFiles {
    /// Read the pair now: an error here stops the daemon from starting.
    pub fn load(cfg: &TlsConfig, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let seen = [stamp(&cfg.cert_file), stamp(&cfg.key_file)];
        let key = read_pair(&cfg.cert_file, &cfg.key_file, &provider)?;
        let files = CertFiles {
            cert_file: cfg.cert_file.clone(),
            key_file: cfg.key_file.clone(),
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new(seen),
        };
        files.note_expiry();
        Ok(files)
    }

    /// Read the pair again if either file changed since it was last read (`force`:
    /// whether or not). `Ok(true)`: a new pair is in force.
    pub fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let now = [stamp(&self.cert_file), stamp(&self.key_file)];
        {
            let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if !force && *seen == now {
                return Ok(false);
            }
        }
        let outcome = read_pair(&self.cert_file, &self.key_file, &self.provider);
        let result = if outcome.is_ok() { "ok" } else { "error" };
        metrics::counter!("tlogd_tls_certificate_reloads_total", "result" => result).increment(1);
        // Remembered either way: a broken pair is retried when the files change again
        // (or on SIGHUP), not logged at every look.
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = now;
        let key = outcome?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
        self.note_expiry();
        Ok(true)
    }

    /// Reload the pair whenever the files change (looked at every `every`) and on
    /// SIGHUP (`hup`), logging what happened, until the process ends.
    pub fn watch(self: Arc<Self>, every: Duration, mut hup: tokio::sync::watch::Receiver<()>) {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                let force = tokio::select! {
                    _ = tick.tick() => false,
                    changed = hup.changed() => {
                        if changed.is_err() {
                            // No more SIGHUPs: keep looking at the files.
                            hup = tokio::sync::watch::channel(()).1;
                        }
                        true
                    }
                };
                let files = self.clone();
                // File reads and a signature-key parse: off the workers.
                let done = tokio::task::spawn_blocking(move || files.reload(force)).await;
                match done {
                    Ok(Ok(true)) => tracing::info!(
                        cert_file = %self.cert_file.display(),
                        "TLS certificate reloaded; new handshakes use it"
                    ),
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => tracing::error!(
                        error = %e,
                        "TLS certificate not reloaded; the one in force stays"
                    ),
                    Err(e) => tracing::error!(error = %e, "TLS certificate reload failed"),
                }
            }
        });
    }

    /// The leaf's `notAfter` as a gauge, so an expiry is seen coming.
    fn note_expiry(&self) {
        let current = self.current();
        let Some(leaf) = current.cert.first() else {
            return;
        };
        if let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) {
            metrics::gauge!("tlogd_tls_certificate_not_after_seconds")
                .set(cert.validity().not_after.timestamp() as f64);
        }
    }

    /// The pair in force.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for CertFiles {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The files' size and modification time (`None`: not there now).
fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// The chain and key in two PEM files, checked to belong together.
fn read_pair(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let file_error = |path: &Path, what: String| TlsError::File {
        path: path.to_path_buf(),
        what,
    };
    let certs = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| file_error(cert_file, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(cert_file, "no CERTIFICATE in it".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key_file).map_err(|e| file_error(key_file, e.to_string()))?;
    let key_error = |what: String| TlsError::Key {
        path: key_file.to_path_buf(),
        what,
    };
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_error(e.to_string()))?;
    let pair = CertifiedKey::new(certs, signing);
    pair.keys_match()
        .map_err(|e| key_error(format!("not the certificate's key ({e})")))?;
    Ok(pair)
}

/// What the public listener hands each new connection to: the handshake and the
/// certificate files behind it.
#[derive(Clone)]
pub struct TlsAcceptor {
    /// The handshake, with the configuration below.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Where the certificate comes from.
    pub files: Arc<CertFiles>,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("cert_file", &self.files.cert_file)
            .finish()
    }
}

impl TlsAcceptor {
    /// TLS 1.3 and 1.2, ALPN `h2` then `http/1.1`, the certificate from `cfg`'s files.
    pub fn new(cfg: &TlsConfig) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = Arc::new(CertFiles::load(cfg, provider.clone())?);
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(files.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsAcceptor {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair for `localhost` (PEM certificate, PEM key, DER certificate).
    fn pair() -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    fn install(dir: &Path, cert: &str, key: &str) {
        for (name, text) in [("cert.pem", cert), ("key.pem", key)] {
            let tmp = dir.join("new");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        }
    }

    /// The files are read again only when they changed; a broken pair is refused and
    /// the one in force stays, and it is not read again until the files change.
    #[test]
    fn a_changed_pair_is_taken_and_a_broken_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig {
            cert_file: dir.path().join("cert.pem"),
            key_file: dir.path().join("key.pem"),
            reload_interval_ms: 1000,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        assert!(matches!(
            CertFiles::load(&cfg, provider.clone()),
            Err(TlsError::File { .. })
        ));
        let (c1, k1, d1) = pair();
        install(dir.path(), &c1, &k1);
        let files = CertFiles::load(&cfg, provider).unwrap();
        let leaf = |f: &CertFiles| f.current().cert[0].to_vec();
        assert_eq!(leaf(&files), d1);
        assert!(!files.reload(false).unwrap());

        let (c2, k2, d2) = pair();
        install(dir.path(), &c2, &k2);
        assert!(files.reload(false).unwrap());
        assert_eq!(leaf(&files), d2);

        // The first pair's certificate with the second's key: refused.
        install(dir.path(), &c1, &k2);
        assert!(matches!(files.reload(false), Err(TlsError::Key { .. })));
        assert_eq!(leaf(&files), d2);
        // Unchanged since: not read again (no error line at every look).
        assert!(!files.reload(false).unwrap());
        // A file with no certificate in it.
        install(dir.path(), "nothing here\n", &k2);
        assert!(matches!(files.reload(false), Err(TlsError::File { .. })));
        assert_eq!(leaf(&files), d2);
        // Forced (SIGHUP), the same broken files are read again, and refused again.
        assert!(files.reload(true).is_err());
        install(dir.path(), &c2, &k2);
        assert!(files.reload(false).unwrap());
        assert_eq!(leaf(&files), d2);
    }
}
