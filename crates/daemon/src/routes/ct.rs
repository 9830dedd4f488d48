//! The submission endpoints of a Certificate Transparency log (C2SP static-ct-api
//! "Submission APIs", RFC 6962 §4.1–4.2): `POST /ct/v1/add-chain`,
//! `POST /ct/v1/add-pre-chain`, `GET /ct/v1/get-roots`; and the issuers the data tiles
//! name by fingerprint, at `GET /issuer/<hex SHA-256>` (static-ct-api "Issuers").
//!
//! An add, in order:
//!
//! 0. The body (at most [`MAX_CHAIN_BODY`], TesseraCT's bound) is parsed; a
//!    resubmission is answered before its chain is validated: the SCT last signed
//!    for the same leaf ([`SctCache`]), or, for a certificate, one signed from what the
//!    dedup index holds (its index and timestamp; the entry is the leaf itself). Its
//!    chain was validated when it was logged, and its SCT commits the log to nothing
//!    new, so the chain sent again is not checked (it may differ: RFC 6962 §4.1).
//!    The chain's length is checked before any certificate is decoded.
//! 1. The chain is validated against the roots (`tlogd_ct::chain`, which checks
//!    names, the root and the keys before any signature, and signatures from the root
//!    down): on the request's thread when its checks are few and cheap, else on the
//!    log's validation threads (`validation.rs`: a bounded queue, a per-address share,
//!    `503` beyond either); `400` with the reason when it does not validate.
//!    Certificates older than `[ct] old_not_before_days` are rate-limited (`429`), and
//!    so is each issuing CA beyond `[ct] issuer_per_second`.
//! 2. Every issuer of the verified path, the root included, is stored at
//!    `issuer/<hex>` with `put_blob` (write-once, durable when it returns) before the
//!    entry is queued: a data tile never names an issuer a reader cannot fetch. An add
//!    the log would refuse now ([`Log::admits`]: frozen, queue full, shutting down)
//!    is refused before, and stores nothing.
//! 3. The entry is sequenced by the engine, which answers once it is durable in the
//!    committed tree, with its index and the timestamp its batch was given.
//! 4. With `await_publication`, the answer waits until a published checkpoint covers
//!    the entry (TesseraCT's publication awaiter).
//! 5. The SCT is signed over the entry as stored (that timestamp, the `leaf_index`
//!    extension). A duplicate gets the SCT of the entry already logged: the dedup
//!    index holds its index and timestamp, so no tile is read (only a resubmission
//!    answered while an uncertain commit was settled reads its data tile back).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use tlogd_core::engine::{Log, LogStorage};
use tlogd_ct::chain::{
    ChainError, ChainKind, ChainPolicy, MAX_CHAIN_LEN, validate, validate_if_cheap,
};
use tlogd_ct::sct::{SignedCertificateTimestamp, timestamped_entry};
use tlogd_ct::{certificate_dedup_key, precertificate_dedup_key};
use tlogd_static_ct::leaf::TimestampedEntry;
use tlogd_static_ct::parse_data_tile;
use tlogd_static_ct::signer::LogKey;

use crate::answer::{add_refused, hex, internal_error, now_ms, read_body, text};
use crate::client::Client;
use crate::config::CtConfig;
use crate::routes::cache;
use crate::routes::ct_roots::{LoadedRoots, RootSet};
use crate::routes::tiles::{Reads, not_yet};
use crate::routes::validation::ValidationPool;
use sha2::{Digest, Sha256};

/// The largest `add-chain` or `add-pre-chain` body taken (TesseraCT's bound).
pub const MAX_CHAIN_BODY: usize = 512 << 10;

/// The media type of an issuer certificate (static-ct-api "Issuers").
const PKIX_CERT: &str = "application/pkix-cert";

/// Issuer fingerprints remembered as stored; beyond this the set starts over (a put of
/// an issuer already stored costs a read, never a second copy).
const MAX_REMEMBERED_ISSUERS: usize = 65_536;

/// How many SCT answers [`SctCache`] keeps per generation (two generations: up to
/// twice this, ~300 bytes each).
const SCT_CACHE_GENERATION: usize = 32_768;

/// The SCT answers (response bodies) last given, by the leaf's dedup key: a CA that
/// resubmits (retries, several log lists) is answered without a signature. Two
/// generations: when the current one is full it becomes the previous one, and the
/// previous one is dropped, so memory is bounded and recent answers stay.
#[derive(Default)]
struct SctCache {
    current: std::collections::HashMap<[u8; 32], Bytes>,
    previous: std::collections::HashMap<[u8; 32], Bytes>,
}

impl SctCache {
    fn get(&self, key: &[u8; 32]) -> Option<Bytes> {
        self.current
            .get(key)
            .or_else(|| self.previous.get(key))
            .cloned()
    }

    fn insert(&mut self, key: [u8; 32], body: Bytes) {
        if self.current.len() >= SCT_CACHE_GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, body);
    }
}

/// A CT log's submission side: its key, roots and policy.
pub struct CtLog {
    key: LogKey,
    roots: Arc<RootSet>,
    policy: ChainPolicy,
    stored_issuers: Mutex<HashSet<[u8; 32]>>,
    /// `GET /issuer` answers.
    issuers: IssuerCache,
    /// The threads that validate costly chains.
    validation: ValidationPool,
    scts: Mutex<SctCache>,
    metrics: SubmissionMetrics,
    body_read_timeout: Duration,
    label: String,
    await_publication: bool,
    old_limit: Option<OldLimit>,
    issuer_limit: Option<IssuerLimit>,
    priority: Priority,
}

/// Priority under load (`[ct] priority_high_water`): the adds in progress, and when the
/// least urgent are refused.
struct Priority {
    high_water: usize,
    old_ms: u64,
    in_progress: std::sync::atomic::AtomicUsize,
}

/// What an add is, for [`Priority`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Urgency {
    /// A certificate that already carries SCTs, or issued long ago.
    Least,
    /// A final certificate.
    Final,
    /// A precertificate: what a CA waits on to issue.
    Most,
}

impl Urgency {
    fn label(self) -> &'static str {
        match self {
            Urgency::Least => "least",
            Urgency::Final => "final",
            Urgency::Most => "precertificate",
        }
    }
}

/// RFC 6962 §3.3: the embedded SCT list extension of a certificate already logged.
const EMBEDDED_SCTS_OID: &str = "1.3.6.1.4.1.11129.2.4.2";

impl Priority {
    /// How urgent the add of `leaf` is (parsed only under load: a few µs, before the
    /// signatures' hundreds). A leaf that does not parse is refused by validation
    /// later, whatever its class here.
    fn urgency(&self, kind: ChainKind, leaf: &[u8], now_ms: u64) -> Urgency {
        if kind == ChainKind::Precertificate {
            return Urgency::Most;
        }
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
            return Urgency::Final;
        };
        let carries_scts = cert
            .extensions()
            .iter()
            .any(|e| e.oid.to_id_string() == EMBEDDED_SCTS_OID);
        let issued_ms = cert.validity().not_before.timestamp().saturating_mul(1000);
        let old = i64::try_from(now_ms.saturating_sub(self.old_ms)).unwrap_or(i64::MAX);
        if carries_scts || issued_ms < old {
            Urgency::Least
        } else {
            Urgency::Final
        }
    }

    /// Whether an add of `urgency` is refused with this many adds in progress.
    fn sheds(&self, urgency: Urgency, in_progress: usize) -> bool {
        match urgency {
            _ if self.high_water == 0 => false,
            Urgency::Least => in_progress >= self.high_water,
            Urgency::Final => in_progress >= self.high_water.saturating_mul(2),
            Urgency::Most => false,
        }
    }
}

/// One add in progress, counted while it lives.
struct InProgress<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The rate limit per issuing CA (`[ct] issuer_per_second`): a token bucket per issuer
/// key hash. Full buckets are forgotten when the map grows past [`MAX_LIMITED_ISSUERS`]
/// (a full bucket is what a new one is), so its memory is bounded however many CAs
/// submit.
struct IssuerLimit {
    per_second: f64,
    burst: f64,
    /// The bucket of each issuer key hash.
    buckets: Mutex<HashMap<[u8; 32], Bucket>>,
}

/// A token bucket's tokens and when they were counted; it refills at `rate` a second up
/// to `burst` (the rate limits of old certificates and of each issuer).
#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Full at `now`.
    fn full(burst: f64, now: Instant) -> Self {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// The tokens at `now` (never before `at`).
    fn level(&self, rate: f64, burst: f64, now: Instant) -> f64 {
        (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * rate).min(burst)
    }

    /// Take a token at `now` if there is one.
    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let tokens = self.level(rate, burst, now);
        let took = tokens >= 1.0;
        *self = Bucket {
            tokens: if took { tokens - 1.0 } else { tokens },
            at: now,
        };
        took
    }
}

/// A token taken from an issuer's bucket, given back when dropped: an add refused
/// after it was taken (its issuers could not be stored, the queue refused it) spends
/// nothing. Forgotten once the add is logged.
struct IssuerToken<'a>(&'a IssuerLimit, [u8; 32]);

impl Drop for IssuerToken<'_> {
    fn drop(&mut self) {
        let mut buckets = self.0.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = buckets.get_mut(&self.1) {
            b.tokens = (b.tokens + 1.0).min(self.0.burst);
        }
    }
}

/// Issuers whose buckets [`IssuerLimit`] keeps before it forgets the full ones (a CT
/// log sees a few hundred issuing CAs).
const MAX_LIMITED_ISSUERS: usize = 16_384;

impl IssuerLimit {
    /// Whether an add of a certificate its issuer key `hash` issued may go on now.
    fn admit(&self, hash: &[u8; 32]) -> bool {
        let (rate, burst) = (self.per_second, self.burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        // Read under the lock: a bucket's time never goes back.
        let now = Instant::now();
        if buckets.len() >= MAX_LIMITED_ISSUERS && !buckets.contains_key(hash) {
            buckets.retain(|_, b| b.level(rate, burst, now) < burst);
            if buckets.len() >= MAX_LIMITED_ISSUERS {
                // Every CA is busy: forgetting them all only gives each a burst more.
                buckets.clear();
            }
        }
        buckets
            .entry(*hash)
            .or_insert(Bucket::full(burst, now))
            .take(rate, burst, now)
    }
}

/// The rate limit of old certificates (`[ct] old_not_before_days`): a token bucket of
/// one second's worth.
struct OldLimit {
    /// Certificates whose notBefore is more than this long ago are limited.
    age_ms: u64,
    per_second: f64,
    bucket: Mutex<Bucket>,
}

impl OldLimit {
    /// Whether an add of a certificate issued at `not_before_ms` may go on now.
    fn admit(&self, not_before_ms: i64, now_ms: u64) -> bool {
        let age = i64::try_from(now_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(not_before_ms);
        if age <= i64::try_from(self.age_ms).unwrap_or(i64::MAX) {
            return true;
        }
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        // One second's worth, at least one.
        b.take(self.per_second, self.per_second.max(1.0), Instant::now())
    }
}

impl std::fmt::Debug for CtLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtLog")
            .field("log", &self.label)
            .field("key", &self.key)
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

impl CtLog {
    /// Load the roots and the policy of `[ct]`; `label` names the log in metrics.
    pub fn load(
        config: &CtConfig,
        key: LogKey,
        body_read_timeout: Duration,
        label: &str,
    ) -> anyhow::Result<Self> {
        let roots = Arc::new(RootSet::load(config, label)?);
        let (not_after_start, not_after_limit) = config.shard_window()?;
        let policy = ChainPolicy {
            reject_expired: config.reject_expired,
            reject_unexpired: config.reject_unexpired,
            not_after_start,
            not_after_limit,
            allowed_ekus: config.allowed_ekus.clone(),
            rejected_extensions: config.rejected_extensions.clone(),
            reject_pre_issuers: config.reject_pre_issuers,
        };
        Ok(CtLog {
            key,
            roots,
            policy,
            stored_issuers: Mutex::new(HashSet::new()),
            issuers: IssuerCache::default(),
            validation: ValidationPool::new(
                "ct",
                config
                    .validation_threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                config.validation_queue,
                config.validation_queue_per_address,
            )
            .context("starting the chain validation threads")?,
            scts: Mutex::new(SctCache::default()),
            metrics: SubmissionMetrics::default(),
            body_read_timeout,
            label: label.to_string(),
            await_publication: config.await_publication,
            priority: Priority {
                high_water: config.priority_high_water,
                old_ms: config.priority_old_days.saturating_mul(86_400_000),
                in_progress: std::sync::atomic::AtomicUsize::new(0),
            },
            old_limit: (config.old_not_before_days > 0).then(|| OldLimit {
                age_ms: config.old_not_before_days.saturating_mul(86_400_000),
                per_second: config.old_not_before_per_second,
                bucket: Mutex::new(Bucket::full(
                    config.old_not_before_per_second.max(1.0),
                    Instant::now(),
                )),
            }),
            issuer_limit: (config.issuer_per_second > 0.0).then(|| IssuerLimit {
                per_second: config.issuer_per_second,
                burst: config
                    .issuer_burst
                    .unwrap_or(config.issuer_per_second)
                    .max(1.0),
                buckets: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The log's roots: in force, and where more come from.
    pub fn root_set(&self) -> &Arc<RootSet> {
        &self.roots
    }

    /// The log's key.
    pub fn key(&self) -> &LogKey {
        &self.key
    }

    fn roots(&self) -> Arc<LoadedRoots> {
        self.roots.current()
    }
}

/// The CT submission routes of `log` (write tokens, when configured, guard these).
pub fn submission_routes<S: LogStorage>(log: Log<S>, ct: Arc<CtLog>) -> Router {
    Router::new()
        .route(
            "/ct/v1/add-chain",
            post(
                |State(s): State<(Log<S>, Arc<CtLog>)>, req: Request| async move {
                    add(s.0, s.1, ChainKind::Certificate, req).await
                },
            ),
        )
        .route(
            "/ct/v1/add-pre-chain",
            post(
                |State(s): State<(Log<S>, Arc<CtLog>)>, req: Request| async move {
                    add(s.0, s.1, ChainKind::Precertificate, req).await
                },
            ),
        )
        .with_state((log, ct))
}

/// The CT read routes of a log: `get-roots` and the issuers, read with the turns
/// its tile reads take (`reads`).
pub(crate) fn read_routes<S: LogStorage>(reads: Arc<Reads<S>>, ct: Arc<CtLog>) -> Router {
    Router::new()
        .route(
            "/ct/v1/get-roots",
            get(|State(s): State<(Arc<Reads<S>>, Arc<CtLog>)>| async move { get_roots(&s.1) }),
        )
        .route(
            "/issuer/{fingerprint}",
            get(
                |State(s): State<(Arc<Reads<S>>, Arc<CtLog>)>,
                 client: Option<axum::Extension<Client>>,
                 headers: axum::http::HeaderMap,
                 UrlPath(f): UrlPath<String>| async move {
                    let addr = client.and_then(|c| c.0.addr);
                    issuer(&s.0, &s.1, addr, &f, &headers).await
                },
            ),
        )
        .with_state((reads, ct))
}

/// RFC 6962 §4.1: `{"chain": [base64 DER, ...]}`. Borrowed from the body (base64
/// needs no JSON escapes; a string with one is copied).
#[derive(Deserialize)]
struct AddChainRequest<'a> {
    #[serde(borrow)]
    chain: Vec<Base64Der<'a>>,
}

/// One base64 certificate of a chain (a `Cow` inside a `Vec` is only borrowed through
/// a newtype: serde borrows a field's `Cow` when told to, never a `Vec`'s elements).
#[derive(Deserialize)]
struct Base64Der<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);

/// The answer to an add the log refused, its `Retry-After` jittered.
fn refused<S: LogStorage>(
    log: &Log<S>,
    e: &tlogd_core::engine::AddError,
    route: &str,
) -> (Response, &'static str) {
    let (mut resp, outcome) = add_refused(e, log.config().retry_after, route);
    if resp.headers().contains_key(header::RETRY_AFTER) {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(jittered(log.config().retry_after)),
        );
    }
    (resp, outcome)
}

/// `503` with `msg` and a jittered `Retry-After`: retrying later can succeed.
fn pushback<S: LogStorage>(log: &Log<S>, msg: &str) -> (Response, &'static str) {
    let mut resp = text(StatusCode::SERVICE_UNAVAILABLE, msg);
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(jittered(log.config().retry_after)),
    );
    (resp, "pushback")
}

/// A `Retry-After` of `base` to twice `base` seconds: CAs submit from many machines
/// at once, and a fixed hint would bring them back in step (TesseraCT jitters too).
fn jittered(base: Duration) -> u64 {
    let base = base.as_secs().max(1);
    let noise = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    base + noise % (base + 1)
}

/// The submission metrics of one CT log, their handles kept: looking a labelled metric
/// up costs a few allocations and a registry lookup, on every add.
#[derive(Default)]
struct SubmissionMetrics {
    /// By (endpoint, outcome): the submissions counter and the duration histogram.
    handles: RwLock<HashMap<(&'static str, &'static str), SubmissionHandles>>,
}

/// One (endpoint, outcome)'s counter and its endpoint's duration histogram.
type SubmissionHandles = (metrics::Counter, metrics::Histogram);

impl SubmissionMetrics {
    fn counted(&self, log: &str, endpoint: &'static str, outcome: &'static str, started: Instant) {
        let elapsed = started.elapsed().as_secs_f64();
        let known = self
            .handles
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(endpoint, outcome))
            .cloned();
        let (counter, histogram) = known.unwrap_or_else(|| {
            let handles = (
                metrics::counter!("tlogd_ct_submissions_total", "log" => log.to_string(), "endpoint" => endpoint, "outcome" => outcome),
                metrics::histogram!("tlogd_ct_submission_duration_seconds", "log" => log.to_string(), "endpoint" => endpoint),
            );
            self.handles
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert((endpoint, outcome), handles.clone());
            handles
        });
        counter.increment(1);
        histogram.record(elapsed);
    }
}

async fn add<S: LogStorage>(
    log: Log<S>,
    ct: Arc<CtLog>,
    kind: ChainKind,
    req: Request,
) -> Response {
    let started = Instant::now();
    let endpoint = match kind {
        ChainKind::Certificate => "add-chain",
        ChainKind::Precertificate => "add-pre-chain",
    };
    let route = match kind {
        ChainKind::Certificate => "POST /ct/v1/add-chain",
        ChainKind::Precertificate => "POST /ct/v1/add-pre-chain",
    };
    let (resp, outcome) = add_inner(&log, &ct, kind, route, req).await;
    ct.metrics.counted(&ct.label, endpoint, outcome, started);
    resp
}

async fn add_inner<S: LogStorage>(
    log: &Log<S>,
    ct: &Arc<CtLog>,
    kind: ChainKind,
    route: &str,
    req: Request,
) -> (Response, &'static str) {
    let (parts, body) = req.into_parts();
    let body = match read_body(
        &parts.headers,
        body,
        parts.extensions.get::<Client>(),
        ct.body_read_timeout,
        MAX_CHAIN_BODY,
        "the request body",
    )
    .await
    {
        Ok(b) => b,
        Err(resp) => return (resp, "bad_request"),
    };
    let bad = |msg: String| (text(StatusCode::BAD_REQUEST, msg), "bad_request");
    let request: AddChainRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad(format!("malformed JSON request: {e}")),
    };
    let Some(leaf) = request.chain.first() else {
        return bad("the chain is empty".into());
    };
    // Counted before any certificate is decoded (#62).
    if request.chain.len() > MAX_CHAIN_LEN {
        return bad(ChainError::TooLong {
            len: request.chain.len(),
            max: MAX_CHAIN_LEN,
        }
        .to_string());
    }
    let leaf = match B64.decode(leaf.0.as_bytes()) {
        Ok(der) => der,
        Err(e) => return bad(format!("chain[0] is not base64: {e}")),
    };
    // Step 0.
    let dedup_key = match kind {
        ChainKind::Certificate => certificate_dedup_key(&leaf),
        ChainKind::Precertificate => precertificate_dedup_key(&leaf),
    };
    if let Some(resp) = ct.known_sct(log, kind, &dedup_key, &leaf).await {
        return (resp, "duplicate");
    }
    // Under load, the least urgent go first (`[ct] priority_high_water`), before their
    // signatures cost anything; precertificates keep what is left.
    let in_progress = ct
        .priority
        .in_progress
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let _in_progress = InProgress(&ct.priority.in_progress);
    if ct.priority.high_water > 0 && in_progress >= ct.priority.high_water {
        let urgency = ct.priority.urgency(kind, &leaf, now_ms());
        if ct.priority.sheds(urgency, in_progress) {
            metrics::counter!("tlogd_ct_priority_shed_total", "log" => ct.label.clone(), "class" => urgency.label())
                .increment(1);
            let (mut resp, outcome) = pushback(
                log,
                "the log is busy and serves precertificates first; retry later",
            );
            *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            return (resp, outcome);
        }
    }
    let mut chain = Vec::with_capacity(request.chain.len());
    chain.push(leaf);
    for (i, c) in request.chain.iter().enumerate().skip(1) {
        match B64.decode(c.0.as_bytes()) {
            Ok(der) => chain.push(der),
            Err(e) => return bad(format!("chain[{i}] is not base64: {e}")),
        }
    }
    // The body may be a slice of the connection's read buffer (`read_body`): let it go
    // before waiting on validation and the commit, and the request's head with it
    // while its memory is warm (see `tiles::add`).
    let client = parts.extensions.get::<Client>().and_then(|c| c.addr);
    drop(request);
    drop(body);
    drop(parts);
    // A few cheap signature checks (RSA up to 4096 bits, P-256: 20-60 µs each) cost
    // about what handing the chain to another thread costs: here. Others (P-384 ~0.7
    // ms, P-521, small RSA keys): on the log's validation threads, within the queue's
    // bound and this client's share of it (`validation.rs`), never on the async
    // threads, which serve every other request, nor on the blocking pool storage uses.
    let roots = ct.roots();
    let validated = match validate_if_cheap(&chain, kind, &roots.roots, &ct.policy, now_ms()) {
        Some(v) => v,
        None => {
            let policy = ct.policy.clone();
            let run = ct.validation.run(client, move || {
                validate(&chain, kind, &roots.roots, &policy, now_ms())
            });
            match run.await {
                Ok(v) => v,
                Err(shed) => {
                    let (reason, msg) = shed.reason();
                    metrics::counter!("tlogd_ct_validation_shed_total", "log" => ct.label.clone(), "reason" => reason)
                        .increment(1);
                    return pushback(log, msg);
                }
            }
        }
    };
    let validated = match validated {
        Ok(v) => v,
        Err(e) => return bad(e.to_string()),
    };
    let entry = match validated.submission.encode() {
        Ok(e) => Bytes::from(e),
        Err(e) => return bad(e.to_string()),
    };
    // Step 2: the issuers, durable before the entry is queued; none stored for an add
    // the log would refuse now (frozen, queue full, ...: #62). Asked before the rate
    // limits, so that an add the log refuses anyway spends nothing of them.
    if let Err(e) = log.admits(entry.len()) {
        return refused(log, &e, route);
    }
    // The issuer's share first: a CA over its own rate must not spend the budget of
    // old certificates every CA shares. Its token is given back if the add goes no
    // further (`IssuerToken`).
    let token = match &ct.issuer_limit {
        Some(limit) if !limit.admit(&validated.issuer_key_hash) => {
            metrics::counter!("tlogd_ct_issuer_limited_total", "log" => ct.label.clone())
                .increment(1);
            let (mut resp, outcome) = pushback(
                log,
                "too many submissions from this certificate's issuer (the log's limit per issuing CA); retry later",
            );
            *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            return (resp, outcome);
        }
        Some(limit) => Some(IssuerToken(limit, validated.issuer_key_hash)),
        None => None,
    };
    if let Some(limit) = &ct.old_limit
        && !limit.admit(validated.not_before_ms, now_ms())
    {
        let (mut resp, outcome) = pushback(
            log,
            "too many submissions of old certificates (notBefore over the log's limit); retry later",
        );
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        return (resp, outcome);
    }
    for (fingerprint, der) in validated.submission.chain.iter().zip(&validated.issuers) {
        let known = ct
            .stored_issuers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(fingerprint);
        if known {
            continue;
        }
        let key = format!("issuer/{}", hex(fingerprint));
        if let Err(e) = log.storage().put_blob(&key, der, PKIX_CERT).await {
            tracing::error!(error = %e, key, "cannot store an issuer");
            return pushback(
                log,
                "cannot store the chain's issuers right now; retry later",
            );
        }
        ct.issuers.stored(fingerprint, der);
        let mut known = ct.stored_issuers.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_REMEMBERED_ISSUERS {
            known.clear();
        }
        known.insert(*fingerprint);
    }
    // Step 3.
    let added = match log.add(entry).await {
        Ok(a) => a,
        Err(e) => return refused(log, &e, route),
    };
    // Logged (or found logged): the issuer's token is spent.
    std::mem::forget(token);
    // A precertificate's entry holds what its chain gave (the issuer's key hash, the
    // TBS as a precertificate signing certificate rewrites it): a resubmission with
    // another chain gives other bytes, so a duplicate's SCT is signed from the entry
    // logged, read back, never from the resubmitted chain (#57).
    let from_submission = !(added.duplicate && kind == ChainKind::Precertificate);
    let stored = match added.timestamp {
        // A new entry, or a certificate's duplicate the dedup index (or the in-flight
        // map) knows the timestamp of: the TimestampedEntry is the submission's, at the
        // original index and timestamp, so a duplicate's SCT is the original's.
        Some(timestamp) if from_submission => {
            timestamped_entry(&validated.submission, added.index, timestamp)
        }
        // A precertificate's duplicate, or a duplicate answered without its timestamp
        // (a resubmission settled with an uncertain commit): read its entry back.
        _ => match log.read_entry(added.index).await {
            Ok(Some(e)) => match parse_data_tile(&e.bytes).map(|mut l| l.pop()) {
                Ok(Some(leaf)) => leaf.timestamped_entry,
                _ => {
                    let why = format!("entry {} does not parse as a TileLeaf", added.index);
                    return (internal_error(route, &why), "error");
                }
            },
            // Sequenced by another frontend this one has not caught up with.
            Ok(None) => {
                return pushback(log, "the entry is logged but not yet readable here; retry");
            }
            Err(e) => return (internal_error(route, &e), "error"),
        },
    };
    if ct.await_publication && !published(log, added.index).await {
        return pushback(
            log,
            "the entry is logged but no checkpoint covers it yet; resubmit for its SCT",
        );
    }
    // Signed from the entry as logged: the answer to every resubmission of it.
    let body = ct.sct_body(Some(&dedup_key), &stored);
    (
        sct_response(body, added.duplicate),
        if added.duplicate { "duplicate" } else { "ok" },
    )
}

impl CtLog {
    /// Step 0: the answer to a resubmission of `leaf`, if this log can give it without
    /// the chain. `None`: not known here; validate and add.
    async fn known_sct<S: LogStorage>(
        &self,
        log: &Log<S>,
        kind: ChainKind,
        dedup_key: &[u8; 32],
        leaf: &[u8],
    ) -> Option<Response> {
        let cached = self
            .scts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dedup_key);
        if let Some(body) = cached {
            return Some(sct_response(body, true));
        }
        // A precertificate's entry needs its issuer's key hash, from the chain.
        if kind != ChainKind::Certificate {
            return None;
        }
        let first = log.committed_duplicate(dedup_key)?;
        let timestamp = first.timestamp?;
        if self.await_publication && log.published_size().is_none_or(|s| s <= first.index) {
            return None;
        }
        let submission = tlogd_ct::Submission {
            entry: tlogd_ct::SubmittedEntry::Certificate { der: leaf.to_vec() },
            chain: Vec::new(),
        };
        let stored = timestamped_entry(&submission, first.index, timestamp);
        Some(sct_response(self.sct_body(Some(dedup_key), &stored), true))
    }

    /// Sign the SCT of `stored`, and remember the answer under `dedup_key` if given.
    fn sct_body(&self, dedup_key: Option<&[u8; 32]>, stored: &TimestampedEntry) -> Bytes {
        let body = Bytes::from(SignedCertificateTimestamp::sign(&self.key, stored).to_json());
        if let Some(key) = dedup_key {
            self.scts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(*key, body.clone());
        }
        body
    }
}

/// `200` with an SCT body; a duplicate says so in a header.
fn sct_response(body: Bytes, duplicate: bool) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if duplicate {
        resp.headers_mut().insert(
            crate::answer::DUPLICATE_HEADER,
            HeaderValue::from_static("true"),
        );
    }
    resp
}

/// Wait until a published checkpoint covers `index` (`[ct] await_publication`), for at
/// most a few checkpoint intervals: the publisher signs one per interval while the tree
/// grows, so a longer wait means it is stuck (storage down, witnesses withholding).
async fn published<S: LogStorage>(log: &Log<S>, index: u64) -> bool {
    let deadline = Instant::now() + 4 * log.config().checkpoint_interval + Duration::from_secs(5);
    loop {
        if log.published_size().is_some_and(|size| size > index) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn get_roots(ct: &CtLog) -> Response {
    let mut resp = (StatusCode::OK, ct.roots().get_roots.clone()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// `GET /issuer/<hex>` (static-ct-api "Issuers"): from [`IssuerCache`] when it
/// knows the answer, else read from storage with a read turn and remembered. A miss
/// is answered `no-store`: a later add (here or at another frontend of the store) may
/// store that issuer.
async fn issuer<S: LogStorage>(
    reads: &Reads<S>,
    ct: &CtLog,
    client: Option<std::net::IpAddr>,
    fingerprint: &str,
    headers: &axum::http::HeaderMap,
) -> Response {
    let not_found = || {
        not_yet(text(
            StatusCode::NOT_FOUND,
            format!("issuer/{fingerprint} not found"),
        ))
    };
    let Some(key) = parse_fingerprint(fingerprint) else {
        return not_yet(text(
            StatusCode::NOT_FOUND,
            "issuer/ paths are 64 lowercase hex digits (a SHA-256)",
        ));
    };
    // Content-addressed: the bytes at this path never change, and a client holding
    // them holds what the path names (crate::routes::cache).
    let etag = cache::immutable_etag(&format!("issuer/{fingerprint}"), false);
    if let Some(etag) = &etag
        && cache::holds(headers, etag)
    {
        return cache::not_modified(etag.clone(), cache::IMMUTABLE, false);
    }
    let found = |der: Bytes| {
        let mut resp = (StatusCode::OK, der).into_response();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(PKIX_CERT));
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(cache::IMMUTABLE),
        );
        if let Some(etag) = etag.clone() {
            h.insert(header::ETAG, etag);
        }
        resp
    };
    match ct.issuers.get(&key) {
        Some(Some(der)) => return found(der),
        Some(None) => return not_found(),
        None => {}
    }
    // Not known here: storage is asked, at most so often for one address (a reader
    // following data tiles asks for a handful of issuers, once each).
    if let Some(ip) = client
        && !ct.issuers.may_read(ip)
    {
        metrics::counter!("tlogd_ct_issuer_reads_limited_total", "log" => ct.label.clone())
            .increment(1);
        let mut resp = not_yet(text(
            StatusCode::TOO_MANY_REQUESTS,
            "too many unknown issuers asked for from this address; retry later",
        ));
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    }
    let turn = match reads.turn("issuer").await {
        Ok(turn) => turn,
        Err(resp) => return resp,
    };
    let read = reads
        .log
        .storage()
        .read_public_blob(&format!("issuer/{fingerprint}"))
        .await;
    drop(turn);
    match read {
        // What is stored under a fingerprint is that certificate (it was checked when
        // stored); anything else is not served, nor remembered.
        Ok(Some(der)) if Sha256::digest(&der)[..] == key[..] => {
            let der = Bytes::from(der);
            ct.issuers.stored(&key, &der);
            found(der)
        }
        Ok(Some(_)) => internal_error(
            "GET /issuer",
            &format!("issuer/{fingerprint} holds bytes of another fingerprint"),
        ),
        Ok(None) => {
            ct.issuers.missing(&key);
            not_found()
        }
        Err(e) => internal_error("GET /issuer", &e),
    }
}

/// 64 lowercase hex digits as the 32 bytes they spell.
fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

/// How many issuers [`IssuerCache`] keeps per generation (two generations; CA
/// certificates are 1 to 2 KB: a few MB at most).
const ISSUER_CACHE_GENERATION: usize = 2048;

/// How many fingerprints found missing it keeps; beyond it the set starts over.
const MISSING_ISSUERS: usize = 65_536;

/// How long a fingerprint found missing is answered `404` without reading storage
/// again: another frontend of a shared store may store that issuer, and its entries'
/// data tiles are public only after it did, so a reader that follows a tile meets at
/// most this much delay; a flood of made-up fingerprints costs one read each per this.
const MISSING_ISSUER_TTL: Duration = Duration::from_secs(1);

/// Storage reads of issuers one client address may cause a second (a token bucket of
/// [`ISSUER_READ_BURST`]); beyond it `429`.
const ISSUER_READS_PER_SECOND: f64 = 20.0;

/// See [`ISSUER_READS_PER_SECOND`].
const ISSUER_READ_BURST: f64 = 100.0;

/// Issuers read or stored here, and fingerprints found missing (#62): a flood of
/// issuer requests, random or repeated, costs storage one read per fingerprint (per
/// [`MISSING_ISSUER_TTL`] for a miss), not one per request, and one address causes at
/// most [`ISSUER_READS_PER_SECOND`] reads (random fingerprints all miss: measured, a
/// flood of them cost the other logs half again what as many plain reads do).
#[derive(Default)]
struct IssuerCache {
    found: Mutex<[HashMap<[u8; 32], Bytes>; 2]>,
    missing: Mutex<HashMap<[u8; 32], Instant>>,
    /// Per client address: tokens left and when they were counted.
    readers: Mutex<HashMap<std::net::IpAddr, (f64, Instant)>>,
}

impl IssuerCache {
    /// `Some(Some(der))`: stored; `Some(None)`: found missing a moment ago; `None`: not
    /// known here.
    fn get(&self, key: &[u8; 32]) -> Option<Option<Bytes>> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(der) = found.iter().find_map(|g| g.get(key)) {
            return Some(Some(der.clone()));
        }
        drop(found);
        let missing = self.missing.lock().unwrap_or_else(|e| e.into_inner());
        match missing.get(key) {
            Some(at) if at.elapsed() < MISSING_ISSUER_TTL => Some(None),
            _ => None,
        }
    }

    /// The issuer with this fingerprint is stored.
    fn stored(&self, key: &[u8; 32], der: &[u8]) {
        self.missing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        if found.iter().any(|g| g.contains_key(key)) {
            return;
        }
        if found[0].len() >= ISSUER_CACHE_GENERATION {
            found[1] = std::mem::take(&mut found[0]);
        }
        found[0].insert(*key, Bytes::copy_from_slice(der));
    }

    /// Whether `ip` may cause one more storage read now (taking a token).
    fn may_read(&self, ip: std::net::IpAddr) -> bool {
        let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if readers.len() >= MISSING_ISSUERS && !readers.contains_key(&ip) {
            // Bounded: addresses whose bucket is full again are forgotten.
            readers.retain(|_, (tokens, at)| {
                *tokens + at.elapsed().as_secs_f64() * ISSUER_READS_PER_SECOND < ISSUER_READ_BURST
            });
            if readers.len() >= MISSING_ISSUERS {
                readers.clear();
            }
        }
        let now = Instant::now();
        let (tokens, at) = readers.entry(ip).or_insert((ISSUER_READ_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * ISSUER_READS_PER_SECOND)
            .min(ISSUER_READ_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Storage holds no issuer with this fingerprint (now).
    fn missing(&self, key: &[u8; 32]) {
        let mut missing = self.missing.lock().unwrap_or_else(|e| e.into_inner());
        if missing.len() >= MISSING_ISSUERS {
            missing.retain(|_, at| at.elapsed() < MISSING_ISSUER_TTL);
            if missing.len() >= MISSING_ISSUERS {
                missing.clear();
            }
        }
        missing.insert(*key, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #62: issuers read or stored are answered from memory; a miss is remembered for
    /// [`MISSING_ISSUER_TTL`] only, and forgotten at once when this frontend stores it.
    #[test]
    fn the_issuer_cache_keeps_hits_and_misses_for_a_moment() {
        let c = IssuerCache::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_eq!(c.get(&a), None);
        c.missing(&a);
        assert_eq!(c.get(&a), Some(None));
        c.stored(&a, b"der a");
        assert_eq!(c.get(&a), Some(Some(Bytes::from_static(b"der a"))));
        c.missing(&b);
        c.missing
            .lock()
            .unwrap()
            .insert(b, Instant::now() - MISSING_ISSUER_TTL);
        assert_eq!(c.get(&b), None, "a miss is remembered for a moment only");
        // Bounded: the oldest generation goes.
        for i in 0..2 * ISSUER_CACHE_GENERATION {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64 + 10).to_be_bytes());
            c.stored(&k, b"x");
        }
        assert_eq!(c.get(&a), None);
        let held: usize = c.found.lock().unwrap().iter().map(HashMap::len).sum();
        assert!(held <= 2 * ISSUER_CACHE_GENERATION);
    }

    /// One address causes at most a burst of storage reads, then a few a second;
    /// another address has its own.
    #[test]
    fn one_address_causes_few_issuer_reads() {
        let c = IssuerCache::default();
        let (a, b): (std::net::IpAddr, std::net::IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let allowed = (0..1000).filter(|_| c.may_read(a)).count();
        assert!(
            (100..=103).contains(&allowed),
            "{allowed} reads allowed at once"
        );
        assert!(c.may_read(b));
        std::thread::sleep(Duration::from_millis(200));
        let again = (0..100).filter(|_| c.may_read(a)).count();
        assert!((3..=6).contains(&again), "{again} reads after 0.2 s");
    }

    #[test]
    fn fingerprints_are_64_lowercase_hex_digits() {
        let hexed = "00ff".repeat(16);
        let fp = parse_fingerprint(&hexed).unwrap();
        assert_eq!(fp[..2], [0x00, 0xff]);
        assert!(parse_fingerprint(&hexed.to_uppercase()).is_none());
        assert!(parse_fingerprint(&hexed[1..]).is_none());
        assert!(parse_fingerprint(&format!("{}g", &hexed[1..])).is_none());
    }
}
