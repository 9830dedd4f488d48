//! HTTPS on the public listener (`[tls]`): rustls with the workspace's provider (ring),
//! TLS 1.3 and 1.2 only, ALPN `h2` and `http/1.1`, and a certificate that is replaced
//! without a restart.
//!
//! The certificate and key come from two PEM files: the operator's (`cert_file`,
//! `key_file`), or those [`crate::serve::acme`] writes to its cache directory after each
//! order from an ACME CA. A handshake takes whatever
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
    /// `None` only while an ACME log waits for its first certificate.
    current: RwLock<Option<Served>>,
    /// The two files' (size, modification time) when `current` was read from them.
    seen: Mutex<[Option<(u64, SystemTime)>; 2]>,
}

/// The pair in force, and what its leaf says of itself.
#[derive(Clone, Debug)]
struct Served {
    key: Arc<CertifiedKey>,
    /// The leaf's validity, Unix seconds.
    not_before: i64,
    not_after: i64,
    /// The leaf's DNS names.
    names: Vec<String>,
}

impl CertFiles {
    /// Read the pair now: an error here stops the daemon from starting.
    pub fn load(
        cert_file: &Path,
        key_file: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let files = CertFiles::empty(cert_file, key_file, provider);
        files.reload(true)?;
        Ok(files)
    }

    /// The pair at these paths, read when [`CertFiles::reload`] is first called.
    pub fn empty(cert_file: &Path, key_file: &Path, provider: Arc<CryptoProvider>) -> Self {
        CertFiles {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            current: RwLock::new(None),
            seen: Mutex::new([None, None]),
        }
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
        let served = outcome?;
        metrics::gauge!("tlogd_tls_certificate_not_after_seconds").set(served.not_after as f64);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(served);
        Ok(true)
    }

    /// Reload the pair whenever the files change (looked at every `every`) and on
    /// SIGHUP (`hup`), logging what happened, until the process ends.
    pub fn watch(self: Arc<Self>, every: Duration, mut hup: tokio::sync::watch::Receiver<()>) {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            let mut hup_open = true;
            loop {
                let force = tokio::select! {
                    _ = tick.tick() => false,
                    changed = hup.changed(), if hup_open => {
                        // No more SIGHUPs (the sender is gone): the files are still
                        // looked at every tick.
                        hup_open = changed.is_ok();
                        hup_open
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

    /// The pair in force (`None` before an ACME log's first certificate).
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        // Every handshake asks: the key alone, not the leaf's names and dates.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.key.clone())
    }

    fn served(&self) -> Option<Served> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When the pair in force should be replaced, as seconds from `now` (Unix
    /// seconds): at once (`0`) when there is none or it does not name every one of
    /// `domains`, else once a third of its lifetime is left (Let's Encrypt's advice:
    /// 30 days of 90), leaving time for failed attempts.
    pub fn renew_in(&self, domains: &[String], now: i64) -> u64 {
        let Some(s) = self.served() else { return 0 };
        if !domains
            .iter()
            .all(|d| s.names.iter().any(|n| n.eq_ignore_ascii_case(d)))
        {
            return 0;
        }
        let lifetime = (s.not_after - s.not_before).max(0);
        let at = s.not_after - lifetime / 3;
        u64::try_from(at - now).unwrap_or(0)
    }

    /// The provider handshakes sign with.
    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }
}

/// ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// What a handshake is answered with: the pair in force, or, to an ACME CA validating
/// a name (ALPN `acme-tls/1`), that name's challenge certificate.
#[derive(Debug)]
pub struct Resolver {
    files: Arc<CertFiles>,
    challenges: Option<Arc<crate::serve::acme::Challenges>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(challenges) = &self.challenges
            && hello
                .alpn()
                .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN))
        {
            // RFC 8737 §3: only the challenge certificate answers `acme-tls/1`.
            return hello.server_name().and_then(|name| challenges.get(name));
        }
        self.files.current()
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
) -> Result<Served, TlsError> {
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
    let (_, leaf) = x509_parser::parse_x509_certificate(pair.cert[0].as_ref())
        .map_err(|e| file_error(cert_file, format!("the first certificate: {e}")))?;
    let names = match leaf.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(Served {
        not_before: leaf.validity().not_before.timestamp(),
        not_after: leaf.validity().not_after.timestamp(),
        names,
        key: Arc::new(pair),
    })
}

/// What the public listener hands each new connection to: the handshake and the
/// certificate files behind it.
#[derive(Clone)]
pub struct TlsAcceptor {
    /// The handshake, with the configuration below.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Where the certificate comes from.
    pub files: Arc<CertFiles>,
    /// With `[tls.acme]`: the TLS-ALPN-01 answers of orders in progress.
    pub challenges: Option<Arc<crate::serve::acme::Challenges>>,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("cert_file", &self.files.cert_file)
            .finish()
    }
}

impl TlsAcceptor {
    /// TLS 1.3 and 1.2, ALPN `h2` then `http/1.1`, the certificate from `cfg`'s files,
    /// or from its ACME cache (then also ALPN `acme-tls/1`, and the ACME task runs from
    /// [`TlsAcceptor::start`]).
    pub fn new(cfg: &TlsConfig) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (files, challenges) = match (&cfg.acme, &cfg.cert_file, &cfg.key_file) {
            (Some(acme), _, _) => {
                let (cert, key) = crate::serve::acme::cached_pair(acme);
                let files = CertFiles::empty(&cert, &key, provider.clone());
                // A cached certificate is served at once; none, or a broken one, is
                // replaced by the first order.
                if let Err(e) = files.reload(true)
                    && cert.exists()
                {
                    tracing::warn!(error = %e, "the cached ACME certificate is not usable; a new one will be ordered");
                }
                (
                    Arc::new(files),
                    Some(Arc::new(crate::serve::acme::Challenges::default())),
                )
            }
            (None, Some(cert), Some(key)) => (
                Arc::new(CertFiles::load(cert, key, provider.clone())?),
                None,
            ),
            _ => {
                return Err(TlsError::Config(rustls::Error::General(
                    "[tls] needs cert_file and key_file, or [tls.acme]".into(),
                )));
            }
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver {
                files: files.clone(),
                challenges: challenges.clone(),
            }));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        if challenges.is_some() {
            config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
        }
        Ok(TlsAcceptor {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            files,
            challenges,
        })
    }

    /// Start what keeps the certificate fresh: the look at the files every
    /// `reload_interval_ms` and on SIGHUP (`hup`), and with `[tls.acme]` the orders.
    /// `shared`: with `[tls.acme] store_key_file`, the blobs of the log that keeps the
    /// state and the key that seals it.
    pub fn start(
        &self,
        cfg: &TlsConfig,
        hup: tokio::sync::watch::Receiver<()>,
        shared: Option<(
            Arc<dyn tlogd_core::engine::versioned::BlobStore>,
            crate::serve::acme::shared::Seal,
        )>,
    ) {
        self.files
            .clone()
            .watch(Duration::from_millis(cfg.reload_interval_ms), hup);
        if let (Some(acme), Some(challenges)) = (&cfg.acme, &self.challenges) {
            match shared {
                Some((blobs, seal)) => crate::serve::acme::shared::spawn(
                    acme.clone(),
                    self.files.clone(),
                    challenges.clone(),
                    blobs,
                    seal,
                ),
                None => {
                    crate::serve::acme::spawn(acme.clone(), self.files.clone(), challenges.clone())
                }
            }
        }
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
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        assert!(matches!(
            CertFiles::load(&cert, &key, provider.clone()),
            Err(TlsError::File { .. })
        ));
        let (c1, k1, d1) = pair();
        install(dir.path(), &c1, &k1);
        let files = CertFiles::load(&cert, &key, provider).unwrap();
        let leaf = |f: &CertFiles| f.current().unwrap().cert[0].to_vec();
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
