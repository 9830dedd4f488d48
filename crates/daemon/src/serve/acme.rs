//! Certificates from an ACME CA (RFC 8555), for `[tls.acme]`: ordered at start when
//! none is cached, renewed once a third of their lifetime is left, proven with
//! TLS-ALPN-01 (RFC 8737) on the public listener itself, or with HTTP-01 on a plain
//! HTTP listener when `http_listen` asks for it ([`http01_router`]). The ACME protocol
//! is instant-acme's; what is here is the policy.
//!
//! The cache directory holds the account (`account.json`, its key and URL) and the
//! pair in force (`cert.pem`, `key.pem`): a restart serves the cached certificate at
//! once, whether or not the CA answers. A new pair is written whole (a file beside,
//! synced, renamed over the old, the directory synced) and then read back through
//! [`CertFiles`], which takes it only if the two files belong together. A failed order
//! changes nothing: the certificate in force is served on (until it expires), an
//! `error` line says why, `tlogd_acme_orders_total{result="error"}` counts it, and the
//! next attempt comes after `retry_interval_ms`, doubled at each failure up to an hour.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use crate::config::AcmeConfig;
use crate::serve::tls::CertFiles;

pub mod shared;

/// The answers of the orders in progress: TLS-ALPN-01 certificates by name, HTTP-01
/// key authorizations by token.
#[derive(Debug, Default)]
pub struct Challenges {
    certificates: Mutex<HashMap<String, Arc<CertifiedKey>>>,
    tokens: Mutex<HashMap<String, String>>,
}

impl Challenges {
    /// The challenge certificate for `name`, if one is being validated.
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.certificates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&name.to_ascii_lowercase())
            .cloned()
    }

    /// The key authorization of HTTP-01 `token`, if one is being validated.
    pub fn key_authorization(&self, token: &str) -> Option<String> {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned()
    }

    pub(crate) fn set(&self, name: &str, cert: Arc<CertifiedKey>) {
        self.certificates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_ascii_lowercase(), cert);
    }

    pub(crate) fn set_token(&self, token: &str, key_authorization: &str) {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.to_string(), key_authorization.to_string());
    }

    pub(crate) fn clear(&self) {
        self.certificates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// The plain HTTP listener of HTTP-01 (`[tls.acme] http_listen`): the CA's requests
/// for `/.well-known/acme-challenge/<token>` get the key authorization, anything else
/// a `308` to the same path over HTTPS on `https_port`.
pub fn http01_router(challenges: Arc<Challenges>, https_port: u16) -> axum::Router {
    use axum::extract::{Path, Request};
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    axum::Router::new()
        .route(
            "/.well-known/acme-challenge/{token}",
            axum::routing::get(move |Path(token): Path<String>| async move {
                match challenges.key_authorization(&token) {
                    Some(answer) => (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/octet-stream")],
                        answer,
                    )
                        .into_response(),
                    None => crate::answer::text(StatusCode::NOT_FOUND, "no such challenge"),
                }
            }),
        )
        .fallback(move |req: Request| async move {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(host_without_port)
                .unwrap_or_default();
            let port = if https_port == 443 {
                String::new()
            } else {
                format!(":{https_port}")
            };
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            match HeaderValue::from_str(&format!("https://{host}{port}{path}")) {
                Ok(to) if !host.is_empty() => {
                    let mut resp = StatusCode::PERMANENT_REDIRECT.into_response();
                    resp.headers_mut().insert(header::LOCATION, to);
                    resp
                }
                _ => crate::answer::text(StatusCode::BAD_REQUEST, "use https://"),
            }
        })
}

/// `Host` without its port: `log.example.com:80` is `log.example.com`, `[::1]:80` is
/// `[::1]`.
fn host_without_port(host: &str) -> String {
    match host.strip_prefix('[') {
        Some(v6) => format!("[{}]", v6.split(']').next().unwrap_or_default()),
        None => host.split(':').next().unwrap_or_default().to_string(),
    }
}

/// Why an order failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// The CA refused or could not be reached.
    #[error("ACME: {0}")]
    Protocol(#[from] instant_acme::Error),
    /// A file of the cache directory.
    #[error("{path}: {source}")]
    Cache {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// Anything else: a challenge certificate, an order in a state it should not be.
    #[error("{0}")]
    Other(String),
}

/// Where `[tls.acme]` keeps the pair in force: `(cert.pem, key.pem)`.
pub fn cached_pair(cfg: &AcmeConfig) -> (PathBuf, PathBuf) {
    (
        cfg.cache_dir.join("cert.pem"),
        cfg.cache_dir.join("key.pem"),
    )
}

/// Keep `files` holding a certificate for `cfg.domains`, until the process ends.
pub fn spawn(cfg: AcmeConfig, files: Arc<CertFiles>, challenges: Arc<Challenges>) {
    tokio::spawn(async move {
        let first_retry = Duration::from_millis(cfg.retry_interval_ms.max(100));
        let check = Duration::from_millis(cfg.check_interval_ms.max(100));
        let mut retry = first_retry;
        loop {
            let due = Duration::from_secs(files.renew_in(&cfg.domains, unix_now()));
            if !due.is_zero() {
                tokio::time::sleep(due.min(check)).await;
                continue;
            }
            let outcome = match account(&cfg).await {
                Ok(account) => order(&cfg, account, &challenges, files.provider(), None).await,
                Err(e) => Err(e),
            };
            challenges.clear();
            let outcome = match outcome {
                Ok((chain, key)) => install(&cfg, &files, &chain, &key),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => {
                    metrics::counter!("tlogd_acme_orders_total", "result" => "ok").increment(1);
                    tracing::info!(domains = ?cfg.domains, directory = %cfg.directory_url, "ACME certificate obtained; new handshakes use it");
                    retry = first_retry;
                }
                Err(e) => {
                    metrics::counter!("tlogd_acme_orders_total", "result" => "error").increment(1);
                    tracing::error!(
                        error = %e,
                        domains = ?cfg.domains,
                        directory = %cfg.directory_url,
                        retry_in = ?retry,
                        serving = if files.current().is_some() { "the certificate in force" } else { "no certificate yet: handshakes fail" },
                        "ACME order failed"
                    );
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(Duration::from_secs(3600));
                }
            }
        }
    });
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The account of the cache directory, created (and saved) if there is none.
async fn account(cfg: &AcmeConfig) -> Result<Account, AcmeError> {
    let path = cfg.cache_dir.join("account.json");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let credentials: AccountCredentials = serde_json::from_slice(&bytes)
                .map_err(|e| AcmeError::Other(format!("{}: {e}", path.display())))?;
            existing_account(cfg, credentials).await
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (account, credentials) = new_account(cfg).await?;
            let json = serde_json::to_vec(&credentials)
                .map_err(|e| AcmeError::Other(format!("the account credentials: {e}")))?;
            write_durably(&cfg.cache_dir, "account.json", &json)?;
            tracing::info!(id = account.id(), "ACME account created");
            Ok(account)
        }
        Err(source) => Err(AcmeError::Cache { path, source }),
    }
}

/// The builder of accounts at `cfg`'s CA (trusting `directory_ca_file` when given).
fn account_builder(cfg: &AcmeConfig) -> Result<instant_acme::AccountBuilder, AcmeError> {
    Ok(match &cfg.directory_ca_file {
        Some(root) => Account::builder_with_root(root)?,
        None => Account::builder()?,
    })
}

/// The account of kept `credentials`, at `cfg`'s CA.
pub(crate) async fn existing_account(
    cfg: &AcmeConfig,
    credentials: AccountCredentials,
) -> Result<Account, AcmeError> {
    Ok(account_builder(cfg)?.from_credentials(credentials).await?)
}

/// A new account at `cfg`'s CA (its contacts, the terms agreed to), and the
/// credentials to keep.
pub(crate) async fn new_account(
    cfg: &AcmeConfig,
) -> Result<(Account, AccountCredentials), AcmeError> {
    let contact: Vec<&str> = cfg.contact.iter().map(String::as_str).collect();
    Ok(account_builder(cfg)?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: cfg.accept_terms_of_service,
                only_return_existing: false,
            },
            cfg.directory_url.clone(),
            None,
        )
        .await?)
}

/// One order for `cfg.domains`, each name proven by TLS-ALPN-01: the chain and its
/// key, as PEM.
async fn order(
    cfg: &AcmeConfig,
    account: Account,
    challenges: &Challenges,
    provider: &rustls::crypto::CryptoProvider,
    publisher: Option<&shared::Publisher>,
) -> Result<(String, String), AcmeError> {
    let identifiers: Vec<Identifier> = cfg
        .domains
        .iter()
        .map(|d| Identifier::Dns(d.clone()))
        .collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => {
                return Err(AcmeError::Other(format!(
                    "authorization for {} is {other:?}",
                    authz.identifier()
                )));
            }
        }
        let name = authz.identifier().to_string();
        let kind = match cfg.http_listen {
            Some(_) => ChallengeType::Http01,
            None => ChallengeType::TlsAlpn01,
        };
        let mut challenge = authz.challenge(kind.clone()).ok_or_else(|| {
            AcmeError::Other(format!("the CA offers no {kind:?} challenge for {name}"))
        })?;
        let key_authorization = challenge.key_authorization();
        if kind == ChallengeType::Http01 {
            challenges.set_token(&challenge.token, key_authorization.as_str());
            if let Some(p) = publisher {
                p.token(&challenge.token, key_authorization.as_str());
            }
        } else {
            let digest = key_authorization.digest();
            challenges.set(
                &name,
                Arc::new(challenge_certificate(&name, digest.as_ref(), provider)?),
            );
            if let Some(p) = publisher {
                p.alpn(&name, digest.as_ref());
            }
        }
        // The other frontends of a shared store answer the CA too: they must have the
        // answer before the CA is told to look.
        if let Some(p) = publisher {
            p.publish().await?;
        }
        challenge.set_ready().await?;
    }
    let retries = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(Duration::from_secs(90));
    let status = order.poll_ready(&retries).await?;
    if status != OrderStatus::Ready {
        return Err(AcmeError::Other(format!(
            "the order is {status:?} after its challenges (is port 443 of {:?} this listener?)",
            cfg.domains
        )));
    }
    let key = order.finalize().await?;
    let chain = order.poll_certificate(&retries).await?;
    Ok((chain, key))
}

/// RFC 8737 §3: a self-signed certificate for `name` carrying the SHA-256 of the key
/// authorization in a critical `acmeIdentifier` extension, its key loaded by the
/// provider the handshakes use.
pub(crate) fn challenge_certificate(
    name: &str,
    digest: &[u8],
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, AcmeError> {
    let fail = |e: &dyn std::fmt::Display| AcmeError::Other(format!("challenge certificate: {e}"));
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| fail(&e))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| fail(&e))?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| fail(&e))?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| fail(&e))?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}

/// Write the new pair to the cache and take it through `files` (which checks that the
/// two belong together).
pub(crate) fn install(
    cfg: &AcmeConfig,
    files: &CertFiles,
    chain: &str,
    key: &str,
) -> Result<(), AcmeError> {
    write_durably(&cfg.cache_dir, "key.pem", key.as_bytes())?;
    write_durably(&cfg.cache_dir, "cert.pem", chain.as_bytes())?;
    files
        .reload(true)
        .map_err(|e| AcmeError::Other(format!("the certificate obtained: {e}")))?;
    Ok(())
}

/// `dir/name` replaced whole by `bytes` (mode 0600): written beside, synced, renamed,
/// the directory synced, so a crash leaves the old file or the new one.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), AcmeError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let cache = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AcmeError::Cache { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(cache(dir))?;
    let tmp = dir.join(format!(".{name}.new"));
    let target = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(cache(&tmp))?;
    f.write_all(bytes).map_err(cache(&tmp))?;
    f.sync_all().map_err(cache(&tmp))?;
    std::fs::rename(&tmp, &target).map_err(cache(&target))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(cache(dir))?;
    Ok(())
}
