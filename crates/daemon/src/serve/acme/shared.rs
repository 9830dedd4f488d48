//! `[tls.acme] store_key_file`: one ACME account and one certificate for every frontend
//! of a shared store, kept in a log's storage instead of each frontend's cache
//! directory (each frontend ordering its own would multiply the orders, and Let's
//! Encrypt limits duplicate certificates to five a week).
//!
//! The state is a document of the log's storage ([`tlogd_core::engine::versioned`], at
//! [`ACME_PREFIX`]), sealed (ChaCha20-Poly1305, a random nonce per version) with the
//! 32-byte key of `store_key_file`, which every frontend shares: the storage may be a
//! public bucket, and the document holds the account key and the certificate's key.
//! It holds the account, the certificate in force and its key, and the order in
//! progress, if any: which frontend holds it, until when, and the challenges' answers.
//!
//! Every frontend reads the newest version every `store_poll_interval_ms`:
//! 1. A certificate other than the one it serves is taken (written to its cache
//!    directory too, so a restart serves it at once, store or not).
//! 2. Another frontend's order in progress: its answers are served here too, since the
//!    CA may reach any frontend behind the names.
//! 3. Due for renewal (or no certificate) and no order held: claim the order by
//!    writing the next version naming this frontend (a lost race means another
//!    frontend claimed it: go back to 1). A claim lasts ten minutes.
//! 4. Holding the claim: order. Each challenge's answer is written (the next version)
//!    and given two polls to reach every frontend before the CA is told to look.
//! 5. The certificate, its key and the account are written as the next version, the
//!    claim dropped; a failed order drops the claim and retries after
//!    `retry_interval_ms`, doubled at each failure up to an hour.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use instant_acme::{Account, AccountCredentials};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};
use tlogd_core::engine::versioned::{self, BlobStore, Written};

use super::{AcmeError, Challenges, challenge_certificate, install, unix_now};
use crate::config::AcmeConfig;
use crate::serve::tls::CertFiles;

/// Where the state lives in the log's storage: version `n` at `acme/<n>`.
pub const ACME_PREFIX: &str = "acme";

/// How long a claim on the order lasts: far more than an order takes.
const CLAIM_SECONDS: i64 = 600;

/// The associated data of version `n`: a version of another document, of another
/// format, or moved to another number (an old state replayed as the newest) does not
/// open.
fn aad(version: u64) -> Vec<u8> {
    format!("tlogd acme state v1 {ACME_PREFIX}/{version}").into_bytes()
}

/// The key that seals the state (`store_key_file`).
pub struct Seal(LessSafeKey);

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(..)")
    }
}

impl Seal {
    /// The key of `store_key_file`: 32 bytes as 64 hex digits or in base64, alone in
    /// the file (surrounding whitespace ignored). Make one with `openssl rand -hex 32`.
    pub fn load(path: &Path) -> Result<Seal, String> {
        use base64::Engine as _;
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            crate::config::parse_fingerprint(text)
                .map_err(|e| e.to_string())?
                .to_vec()
        } else {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| format!("{}: not 32 bytes in hex or base64", path.display()))?
        };
        if bytes.len() != 32 {
            return Err(format!(
                "{}: {} bytes, not 32 (make one with `openssl rand -hex 32`)",
                path.display(),
                bytes.len()
            ));
        }
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|e| e.to_string())?;
        Ok(Seal(LessSafeKey::new(key)))
    }

    fn seal(&self, plain: &[u8], version: u64) -> Result<Vec<u8>, AcmeError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| AcmeError::Other(format!("random: {e}")))?;
        let mut out = plain.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(version)),
                &mut out,
            )
            .map_err(|_| AcmeError::Other("sealing the ACME state".into()))?;
        Ok([&nonce[..], &out].concat())
    }

    fn open(&self, sealed: &[u8], version: u64) -> Result<Vec<u8>, AcmeError> {
        let bad = || {
            AcmeError::Other(
                "the shared ACME state does not open with `store_key_file` (another key, or damaged)"
                    .into(),
            )
        };
        if sealed.len() < NONCE_LEN {
            return Err(bad());
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| bad())?;
        let mut buf = rest.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(aad(version)), &mut buf)
            .map_err(|_| bad())?;
        Ok(plain.to_vec())
    }
}

/// The order in progress.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Claim {
    /// The frontend holding it (a random name it took at start).
    holder: String,
    /// Until when (Unix seconds).
    until: i64,
    /// HTTP-01 answers: token → key authorization.
    #[serde(default)]
    tokens: BTreeMap<String, String>,
    /// TLS-ALPN-01 answers: name → SHA-256 of the key authorization, hex.
    #[serde(default)]
    alpn: BTreeMap<String, String>,
}

/// The shared state, as sealed in each version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    /// The account's credentials (instant-acme's `AccountCredentials`).
    account: Option<serde_json::Value>,
    /// The certificate chain in force (PEM).
    chain: Option<String>,
    /// Its key (PEM).
    key: Option<String>,
    /// The order in progress.
    order: Option<Claim>,
}

/// The state store of one daemon: the log's blobs, the seal, the version last read.
struct Store {
    blobs: Arc<dyn BlobStore>,
    seal: Seal,
    version: Mutex<u64>,
}

impl Store {
    fn known(&self) -> u64 {
        *self.version.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn saw(&self, v: u64) {
        let mut known = self.version.lock().unwrap_or_else(|e| e.into_inner());
        *known = (*known).max(v);
    }

    /// The newest state and its version (0 and the empty state: none yet).
    async fn read(&self) -> Result<(u64, State), AcmeError> {
        let newest = versioned::newest(&*self.blobs, ACME_PREFIX, self.known())
            .await
            .map_err(|e| AcmeError::Other(format!("reading the shared ACME state: {e}")))?;
        match newest {
            None => Ok((0, State::default())),
            Some((v, sealed)) => {
                self.saw(v);
                let plain = self.seal.open(&sealed, v)?;
                let state = serde_json::from_slice(&plain).map_err(|e| {
                    AcmeError::Other(format!("the shared ACME state (version {v}): {e}"))
                })?;
                Ok((v, state))
            }
        }
    }

    /// Write `state` as version `v`: `Ok(false)` if another frontend wrote it first.
    async fn write(&self, v: u64, state: &State) -> Result<bool, AcmeError> {
        let plain = serde_json::to_vec(state)
            .map_err(|e| AcmeError::Other(format!("the shared ACME state: {e}")))?;
        let sealed = self.seal.seal(&plain, v)?;
        match versioned::write(
            &*self.blobs,
            ACME_PREFIX,
            v,
            &sealed,
            "application/octet-stream",
        )
        .await
        {
            Ok(Written::Won) => {
                self.saw(v);
                Ok(true)
            }
            Ok(Written::Lost) => Ok(false),
            Err(e) => Err(AcmeError::Other(format!(
                "writing the shared ACME state: {e}"
            ))),
        }
    }
}

/// What an order tells the other frontends ([`super::order`] calls it per challenge).
pub(crate) struct Publisher {
    store: Arc<Store>,
    /// The version the claim (or the last answer) was written as, and the state.
    at: tokio::sync::Mutex<(u64, State)>,
    pending: Mutex<Claim>,
    settle: Duration,
}

impl Publisher {
    /// An HTTP-01 answer to publish.
    pub(crate) fn token(&self, token: &str, key_authorization: &str) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tokens
            .insert(token.to_string(), key_authorization.to_string());
    }

    /// A TLS-ALPN-01 answer to publish.
    pub(crate) fn alpn(&self, name: &str, digest: &[u8]) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alpn
            .insert(name.to_ascii_lowercase(), crate::answer::hex(digest));
    }

    /// Write the answers so far as the next version, then give every frontend two
    /// polls to read them. Another writer in between ends the order: the claim is no
    /// longer this frontend's.
    pub(crate) async fn publish(&self) -> Result<(), AcmeError> {
        let mut at = self.at.lock().await;
        let mut next = at.1.clone();
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(o) = next.order.as_mut() {
            o.tokens = pending.tokens;
            o.alpn = pending.alpn;
            o.until = unix_now() + CLAIM_SECONDS;
        }
        if !self.store.write(at.0 + 1, &next).await? {
            return Err(AcmeError::Other(
                "another frontend changed the shared ACME state during the order".into(),
            ));
        }
        *at = (at.0 + 1, next);
        drop(at);
        tokio::time::sleep(self.settle).await;
        Ok(())
    }
}

/// The shared mode of [`super::spawn`]: keep `files` holding the certificate of the
/// shared state (the module's steps), until the process ends.
pub fn spawn(
    cfg: AcmeConfig,
    files: Arc<CertFiles>,
    challenges: Arc<Challenges>,
    blobs: Arc<dyn BlobStore>,
    seal: Seal,
) {
    let store = Arc::new(Store {
        blobs,
        seal,
        version: Mutex::new(0),
    });
    tokio::spawn(async move {
        let mut name = [0u8; 8];
        let _ = getrandom::fill(&mut name);
        let me = crate::answer::hex(&name);
        let poll = Duration::from_millis(cfg.store_poll_interval_ms.max(50));
        let first_retry = Duration::from_millis(cfg.retry_interval_ms.max(100));
        let mut retry = first_retry;
        let mut not_before = tokio::time::Instant::now();
        let mut installed: Option<String> = None;
        // The answers of another frontend's order served here, by version.
        let mut answering: Option<u64> = None;
        loop {
            match round(
                &cfg,
                &files,
                &challenges,
                &store,
                &me,
                &mut installed,
                &mut answering,
            )
            .await
            {
                Ok(Round::Idle) => {}
                Ok(Round::Due) if tokio::time::Instant::now() >= not_before => {
                    match claim_and_order(
                        &cfg,
                        &files,
                        &challenges,
                        &store,
                        (&me, installed.as_ref()),
                        poll,
                    )
                    .await
                    {
                        Ok(Some(chain)) => {
                            installed = Some(chain);
                            retry = first_retry;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            metrics::counter!("tlogd_acme_orders_total", "result" => "error")
                                .increment(1);
                            tracing::error!(
                                error = %e,
                                domains = ?cfg.domains,
                                retry_in = ?retry,
                                serving = if files.current().is_some() { "the certificate in force" } else { "no certificate yet: handshakes fail" },
                                "ACME order (shared store) failed"
                            );
                            not_before = tokio::time::Instant::now() + retry;
                            retry = (retry * 2).min(Duration::from_secs(3600));
                        }
                    }
                    continue;
                }
                Ok(Round::Due) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "ACME (shared store): the state could not be read; the certificate in force stays")
                }
            }
            tokio::time::sleep(poll).await;
        }
    });
}

enum Round {
    /// Nothing to do until the next poll.
    Idle,
    /// The certificate is due and nobody holds the order.
    Due,
}

/// Steps 1 and 2: take the stored certificate and another frontend's answers.
async fn round(
    cfg: &AcmeConfig,
    files: &CertFiles,
    challenges: &Challenges,
    store: &Store,
    me: &str,
    installed: &mut Option<String>,
    answering: &mut Option<u64>,
) -> Result<Round, AcmeError> {
    let (version, state) = store.read().await?;
    if let (Some(chain), Some(key)) = (&state.chain, &state.key)
        && installed.as_ref() != Some(chain)
    {
        match install(cfg, files, chain, key) {
            Ok(()) => {
                *installed = Some(chain.clone());
                tracing::info!(version, "ACME certificate taken from the shared store");
            }
            Err(e) => {
                tracing::warn!(error = %e, version, "the shared store's ACME certificate is not usable")
            }
        }
    }
    let now = unix_now();
    match &state.order {
        Some(o) if o.until > now && o.holder != me => {
            if *answering != Some(version) {
                challenges.clear();
                for (token, answer) in &o.tokens {
                    challenges.set_token(token, answer);
                }
                for (name, digest) in &o.alpn {
                    // The SHA-256 of the key authorization, as `Publisher::alpn` wrote it.
                    let digest = crate::config::parse_fingerprint(digest).map_err(|_| {
                        AcmeError::Other(format!("the shared ACME state: a bad digest for {name}"))
                    })?;
                    let cert = challenge_certificate(name, &digest, files.provider())?;
                    challenges.set(name, Arc::new(cert));
                }
                *answering = Some(version);
            }
            Ok(Round::Idle)
        }
        held => {
            if answering.take().is_some() {
                challenges.clear();
            }
            let free = held.as_ref().is_none_or(|o| o.until <= now);
            if free && files.renew_in(&cfg.domains, now) == 0 {
                Ok(Round::Due)
            } else {
                Ok(Round::Idle)
            }
        }
    }
}

/// Steps 3 to 5: the certificate obtained (`Some(chain)`), or `None` when another
/// frontend claimed the order first.
async fn claim_and_order(
    cfg: &AcmeConfig,
    files: &CertFiles,
    challenges: &Challenges,
    store: &Arc<Store>,
    (me, installed): (&str, Option<&String>),
    poll: Duration,
) -> Result<Option<String>, AcmeError> {
    let (version, mut state) = store.read().await?;
    // Read again since the round that found it due: another frontend may have claimed
    // the order, or stored a certificate, meanwhile.
    if state.order.as_ref().is_some_and(|o| o.until > unix_now())
        || state.chain.as_ref() != installed
    {
        return Ok(None);
    }
    state.order = Some(Claim {
        holder: me.to_string(),
        until: unix_now() + CLAIM_SECONDS,
        ..Claim::default()
    });
    if !store.write(version + 1, &state).await? {
        return Ok(None);
    }
    tracing::info!(domains = ?cfg.domains, "ACME order claimed for every frontend of the shared store");
    let publisher = Publisher {
        store: store.clone(),
        at: tokio::sync::Mutex::new((version + 1, state.clone())),
        pending: Mutex::new(Claim::default()),
        settle: poll * 2 + Duration::from_millis(200),
    };
    // The account is kept whatever comes of the order: a retry must not register
    // another.
    let mut credentials = None;
    let outcome = async {
        let (account, created) = account(cfg, state.account.clone()).await?;
        credentials = Some(created);
        super::order(cfg, account, challenges, files.provider(), Some(&publisher)).await
    }
    .await;
    challenges.clear();
    drop(publisher);
    // Served here at once; then merged onto the newest state, the claim dropped (it
    // must not outlive the order, whatever came of it).
    let obtained = match outcome {
        Ok((chain, key)) => match install(cfg, files, &chain, &key) {
            Ok(()) => Ok((chain, key)),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let mut stored = false;
    for _ in 0..5 {
        let (v, mut newest) = store.read().await?;
        if newest.order.as_ref().is_some_and(|o| o.holder == me) {
            newest.order = None;
        }
        if let Some(c) = &credentials {
            newest.account.get_or_insert_with(|| c.clone());
        }
        if let Ok((chain, key)) = &obtained {
            newest.chain = Some(chain.clone());
            newest.key = Some(key.clone());
        }
        if store.write(v + 1, &newest).await? {
            stored = true;
            break;
        }
    }
    if !stored {
        tracing::warn!(
            "the shared ACME state kept changing; the outcome of this order was not stored"
        );
    }
    let (chain, _) = obtained?;
    metrics::counter!("tlogd_acme_orders_total", "result" => "ok").increment(1);
    tracing::info!(domains = ?cfg.domains, directory = %cfg.directory_url, "ACME certificate obtained for every frontend of the shared store; new handshakes use it");
    Ok(Some(chain))
}

/// The account of the shared state, created if there is none: the client and the
/// credentials to store.
async fn account(
    cfg: &AcmeConfig,
    stored: Option<serde_json::Value>,
) -> Result<(Account, serde_json::Value), AcmeError> {
    if let Some(json) = stored {
        let credentials: AccountCredentials = serde_json::from_value(json.clone())
            .map_err(|e| AcmeError::Other(format!("the shared ACME account: {e}")))?;
        return Ok((super::existing_account(cfg, credentials).await?, json));
    }
    let (account, credentials) = super::new_account(cfg).await?;
    let json = serde_json::to_value(&credentials)
        .map_err(|e| AcmeError::Other(format!("the account credentials: {e}")))?;
    tracing::info!(
        id = account.id(),
        "ACME account created for the shared store"
    );
    Ok((account, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_opens_only_with_its_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, "ab".repeat(32)).expect("write");
        std::fs::write(&b, "cd".repeat(32)).expect("write");
        let (sa, sb) = (Seal::load(&a).expect("a"), Seal::load(&b).expect("b"));
        let sealed = sa.seal(b"the account key", 3).expect("seal");
        assert_eq!(sa.open(&sealed, 3).expect("open"), b"the account key");
        assert!(sb.open(&sealed, 3).is_err(), "another key");
        assert!(sa.open(&sealed, 4).is_err(), "replayed as another version");
        let mut flipped = sealed.clone();
        flipped[20] ^= 1;
        assert!(sa.open(&flipped, 3).is_err(), "a flipped byte");
        assert_ne!(
            sa.seal(b"x", 1).expect("seal"),
            sa.seal(b"x", 1).expect("seal"),
            "a nonce per version"
        );
        std::fs::write(&a, "too short").expect("write");
        assert!(Seal::load(&a).unwrap_err().contains("not 32 bytes"));
    }
}
