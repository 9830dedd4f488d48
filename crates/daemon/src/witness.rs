//! Witness cosigning (C2SP tlog-witness, tlog-cosignature): after the log signs a
//! checkpoint, every witness of the policy is asked, concurrently, to `add-checkpoint`
//! it with a consistency proof built from the log's own tiles; the cosignatures that
//! verify are appended to the published checkpoint. When the policy's quorum is not
//! met the checkpoint is withheld (the engine retries after the checkpoint interval),
//! or published anyway with `fail_open`.
//!
//! tlog-witness "add-checkpoint": the old size sent is the size the witness last
//! cosigned. It is not persisted: after a restart the first request says `old 0` (or the
//! last size this process saw) and a witness that knows better answers `409 Conflict`
//! with its size, which is then retried once with a proof from that size.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures_util::StreamExt as _;
use hyper::{Method, StatusCode};
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::engine::{BoxFuture, CheckpointCosigner, ConsistencyProver};
use tlogd_core::note::{Note, NoteSignature, NoteVerifier};
use tlogd_core::witness::{
    PolicyWitness, WitnessPolicy, add_checkpoint_body, parse_cosignatures, parse_size_body,
};
use tlogd_http::client::{BaseUrl, Client, ClientError};

use crate::config::WitnessingConfig;

/// How long the others are still waited for once the policy is met: a witness a little
/// slower than the quorum still gets its cosignature on the checkpoint, and a slow or
/// stuck one delays no checkpoint by more than this.
const QUORUM_GRACE: Duration = Duration::from_millis(200);

/// The largest answer read from a witness: a few signature lines is all an honest one
/// sends (tlog-witness "add-checkpoint").
const WITNESS_MAX_BODY: usize = 64 << 10;

/// `409` answers followed per request: one for a witness that knows a newer size than
/// we did, one more if it moved meanwhile.
const MAX_CONFLICTS: usize = 2;

/// Why one witness did not cosign.
#[derive(Debug)]
enum Failure {
    Timeout(Duration),
    Transport(String),
    Status(StatusCode, String),
    Invalid(String),
    Ahead(u64),
    /// Not waited for: the policy was met and the grace for the rest ran out.
    NotAwaited,
}

impl Failure {
    fn outcome(&self) -> &'static str {
        match self {
            Failure::Timeout(_) => "timeout",
            Failure::Transport(_) => "error",
            Failure::Status(..) => "error",
            Failure::Invalid(_) => "invalid",
            Failure::Ahead(_) => "ahead",
            Failure::NotAwaited => "not_awaited",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout(t) => write!(f, "no answer within {t:?}"),
            Failure::Transport(e) => write!(f, "{e}"),
            Failure::Status(s, body) => write!(f, "HTTP {s}: {body}"),
            Failure::Invalid(e) => write!(f, "{e}"),
            Failure::Ahead(size) => write!(
                f,
                "it has cosigned size {size}, beyond this checkpoint: the log went back?"
            ),
            Failure::NotAwaited => write!(
                f,
                "not waited for: the policy was met and {QUORUM_GRACE:?} passed"
            ),
        }
    }
}

/// The witnesses of a policy and how to reach them.
pub struct Witnesses {
    policy: WitnessPolicy,
    /// One keep-alive connection per witness (tlog-witness "HTTP Interface": clients
    /// SHOULD use keep-alive); a witness gets one request at a time.
    clients: Vec<tokio::sync::Mutex<Client>>,
    timeout: Duration,
    fail_open: bool,
    /// Per witness: the size it last cosigned or reported (the `old` it expects).
    known: Mutex<Vec<u64>>,
}

impl std::fmt::Debug for Witnesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Witnesses({})", self.policy.describe())
    }
}

/// The witnesses of `[witnessing]`, or `None` when no policy is configured. `log_keys`
/// are the log's keys (every signer's verifier).
pub fn from_config(
    c: &WitnessingConfig,
    log_keys: &[NoteVerifier],
) -> anyhow::Result<Option<Witnesses>> {
    let Some(path) = &c.policy_file else {
        return Ok(None);
    };
    let policy = load_policy(path)?;
    Witnesses::new(
        policy,
        log_keys,
        Duration::from_millis(c.timeout_ms),
        c.fail_open,
    )
    .map(Some)
    .with_context(|| format!("witness policy {}", path.display()))
}

fn load_policy(path: &Path) -> anyhow::Result<WitnessPolicy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading witness policy {}", path.display()))?;
    WitnessPolicy::parse(&text).with_context(|| format!("in {}", path.display()))
}

impl Witnesses {
    /// Witnesses of `policy` for the log signed by `log_keys` (all its signers'
    /// keys). Every witness needs a URL (its submission prefix, `http://` or
    /// `https://`); a policy that lists logs must list this one, by any of its keys (a
    /// log rotating its key is listed by the old key or the new one).
    pub fn new(
        policy: WitnessPolicy,
        log_keys: &[NoteVerifier],
        timeout: Duration,
        fail_open: bool,
    ) -> anyhow::Result<Self> {
        if !policy.logs().is_empty() && !policy.logs().iter().any(|l| log_keys.contains(l)) {
            let keys: Vec<String> = log_keys
                .iter()
                .map(|k| format!("{}+{:08x}", k.name(), k.key_id()))
                .collect();
            bail!(
                "the policy lists logs, but not this one (by any of its keys: {})",
                keys.join(", ")
            );
        }
        if timeout.is_zero() {
            bail!("`witnessing.timeout_ms` must be at least 1");
        }
        let mut clients = Vec::with_capacity(policy.witnesses().len());
        for w in policy.witnesses() {
            let Some(url) = &w.url else {
                bail!(
                    "witness {} has no URL: the log must reach it (witness <name> <vkey> <url>)",
                    w.name
                );
            };
            let base = BaseUrl::parse(url).with_context(|| format!("witness {}", w.name))?;
            // Far beyond any honest answer; bounds what a hostile witness costs.
            let client = Client::new(base, None, timeout)
                .with_context(|| format!("witness {}", w.name))?
                .with_max_body(WITNESS_MAX_BODY);
            clients.push(tokio::sync::Mutex::new(client));
        }
        let known = Mutex::new(vec![0; policy.witnesses().len()]);
        Ok(Witnesses {
            policy,
            clients,
            timeout,
            fail_open,
            known,
        })
    }

    /// The policy's quorum in words.
    pub fn describe(&self) -> String {
        self.policy.describe()
    }

    fn known(&self, i: usize) -> u64 {
        self.known.lock().unwrap_or_else(|e| e.into_inner())[i]
    }

    fn set_known(&self, i: usize, size: u64) {
        self.known.lock().unwrap_or_else(|e| e.into_inner())[i] = size;
    }

    /// POST add-checkpoint to witness `i`; `(status, body)`.
    async fn post(&self, i: usize, body: Vec<u8>) -> Result<(StatusCode, Bytes), Failure> {
        let mut client = self.clients[i].lock().await;
        let resp = client
            .send(Method::POST, "add-checkpoint", Bytes::from(body))
            .await
            .map_err(|e| match e {
                ClientError::Timeout(_) => Failure::Timeout(self.timeout),
                other => Failure::Transport(other.to_string()),
            })?;
        Ok((resp.status, resp.body))
    }

    /// Ask witness `i` to cosign; its verified cosignature lines.
    async fn ask(
        &self,
        i: usize,
        w: &PolicyWitness,
        cp: &Checkpoint,
        text: &str,
        signed: &[u8],
        prover: &dyn ConsistencyProver,
    ) -> Result<Vec<NoteSignature>, Failure> {
        let mut old = self.known(i);
        let mut conflicts = 0;
        loop {
            if old > cp.size {
                return Err(Failure::Ahead(old));
            }
            let proof = prover
                .consistency_proof(old, cp.size)
                .await
                .map_err(|e| Failure::Invalid(format!("building the proof from {old}: {e}")))?;
            let (status, body) = self
                .post(i, add_checkpoint_body(old, &proof, signed))
                .await?;
            match status {
                StatusCode::OK => {
                    let sigs = parse_cosignatures(text, &body).map_err(|e| {
                        Failure::Invalid(format!("unparseable cosignature lines: {e}"))
                    })?;
                    // tlog-witness: cosignatures from unknown keys are ignored.
                    let mine: Vec<NoteSignature> =
                        sigs.into_iter().filter(|s| w.verifier.matches(s)).collect();
                    if mine.is_empty() {
                        return Err(Failure::Invalid(format!(
                            "no cosignature from its key {}",
                            w.verifier.to_vkey()
                        )));
                    }
                    // tlog-witness "add-checkpoint": the timestamp MUST NOT be zero.
                    for s in &mine {
                        w.verifier.verify_witnessed(text, s).map_err(|e| {
                            Failure::Invalid(format!("its cosignature does not verify: {e}"))
                        })?;
                    }
                    self.set_known(i, cp.size);
                    return Ok(mine);
                }
                StatusCode::CONFLICT => {
                    metrics::counter!("tlogd_witness_requests_total", "witness" => w.name.clone(), "outcome" => "conflict").increment(1);
                    let size = parse_size_body(&body).ok_or_else(|| {
                        Failure::Invalid("409 without a tree size in its body".into())
                    })?;
                    tracing::info!(witness = %w.name, sent = old, size, "witness knows another size; retrying from it");
                    self.set_known(i, size);
                    conflicts += 1;
                    if size == old || conflicts > MAX_CONFLICTS {
                        return Err(Failure::Invalid(format!(
                            "409 again, with size {size} (sent old {old})"
                        )));
                    }
                    old = size;
                }
                s => {
                    let first = String::from_utf8_lossy(&body)
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(200)
                        .collect();
                    return Err(Failure::Status(s, first));
                }
            }
        }
    }
}

impl CheckpointCosigner for Witnesses {
    fn cosign<'a>(
        &'a self,
        cp: &'a Checkpoint,
        signed: &'a [u8],
        prover: &'a dyn ConsistencyProver,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            let text = cp.to_text();
            let asks = self.policy.witnesses().iter().enumerate().map(|(i, w)| {
                let text = &text;
                async move {
                    let started = Instant::now();
                    // Each request has the client's timeout (which also drops its
                    // connection); this bounds the whole exchange, proofs included.
                    let bound = self.timeout * (MAX_CONFLICTS as u32 + 2);
                    let r = match tokio::time::timeout(
                        bound,
                        self.ask(i, w, cp, text, signed, prover),
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => Err(Failure::Timeout(bound)),
                    };
                    metrics::histogram!("tlogd_witness_request_duration_seconds", "witness" => w.name.clone())
                        .record(started.elapsed().as_secs_f64());
                    let outcome = match &r {
                        Ok(_) => "cosigned",
                        Err(f) => f.outcome(),
                    };
                    metrics::counter!("tlogd_witness_requests_total", "witness" => w.name.clone(), "outcome" => outcome).increment(1);
                    r
                }
            });
            // Answers are taken as they come; once the policy is met, the rest get
            // QUORUM_GRACE and are then dropped (the client drops a connection whose
            // exchange was cut, so a late answer is never read as the next one's).
            let mut pending: futures_util::stream::FuturesUnordered<_> = asks
                .enumerate()
                .map(|(i, ask)| async move { (i, ask.await) })
                .collect();
            let n = self.policy.witnesses().len();
            let mut answers: Vec<Option<Result<Vec<NoteSignature>, Failure>>> =
                std::iter::repeat_with(|| None).take(n).collect();
            let mut grace_until = None;
            loop {
                let next = match grace_until {
                    None => pending.next().await,
                    Some(at) => tokio::time::timeout_at(at, pending.next())
                        .await
                        .unwrap_or(None),
                };
                let Some((i, r)) = next else { break };
                answers[i] = Some(r);
                if grace_until.is_none() {
                    let cosigned: Vec<bool> =
                        answers.iter().map(|a| matches!(a, Some(Ok(_)))).collect();
                    if self.policy.satisfied(&cosigned) {
                        grace_until = Some(tokio::time::Instant::now() + QUORUM_GRACE);
                    }
                }
            }
            drop(pending);
            let results: Vec<Result<Vec<NoteSignature>, Failure>> = answers
                .into_iter()
                .zip(self.policy.witnesses())
                .map(|(a, w)| {
                    a.unwrap_or_else(|| {
                        metrics::counter!("tlogd_witness_requests_total", "witness" => w.name.clone(), "outcome" => "not_awaited").increment(1);
                        Err(Failure::NotAwaited)
                    })
                })
                .collect();
            let mut note = Note::parse(signed).map_err(|e| format!("own checkpoint: {e}"))?;
            let mut cosigned = Vec::with_capacity(results.len());
            let mut failures = Vec::new();
            for (w, r) in self.policy.witnesses().iter().zip(results) {
                match r {
                    Ok(sigs) => {
                        cosigned.push(true);
                        note.signatures.extend(sigs);
                    }
                    Err(f) => {
                        tracing::warn!(witness = %w.name, size = cp.size, error = %f, "witness did not cosign");
                        cosigned.push(false);
                        failures.push(format!("{}: {f}", w.name));
                    }
                }
            }
            let count = cosigned.iter().filter(|c| **c).count();
            if self.policy.satisfied(&cosigned) {
                metrics::gauge!("tlogd_checkpoint_cosignatures").set(count as f64);
                return Ok(note.to_bytes());
            }
            let reason = format!(
                "witness policy not met (quorum {}): {count} of {} witnesses cosigned; {}",
                self.policy.describe(),
                cosigned.len(),
                failures.join("; ")
            );
            if self.fail_open {
                metrics::counter!("tlogd_witness_policy_unmet_total", "action" => "published")
                    .increment(1);
                metrics::gauge!("tlogd_checkpoint_cosignatures").set(count as f64);
                tracing::warn!(size = cp.size, %reason, "publishing anyway (witnessing.fail_open)");
                return Ok(note.to_bytes());
            }
            metrics::counter!("tlogd_witness_policy_unmet_total", "action" => "withheld")
                .increment(1);
            Err(reason)
        })
    }
}
