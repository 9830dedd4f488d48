//! A witness written to C2SP tlog-witness ("add-checkpoint") and tlog-cosignature,
//! for tests: one log, state in memory, on 127.0.0.1. Knobs make it slow, broken
//! (always `409` with a fixed size) or restored from an old backup.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::cosignature::{CosignatureSigner, generate_cosigner_key};
use tlogd_core::hash::{Hash, empty_root};
use tlogd_core::mldsa::{MlDsa44Signer, generate_mldsa44_key};
use tlogd_core::note::{Note, NoteSignature, NoteVerifier, open_note};
use tlogd_core::proof::verify_consistency;
use tlogd_core::witness::{SIZE_CONTENT_TYPE, parse_add_checkpoint};

/// Misbehaviour on demand.
#[derive(Clone, Debug, Default)]
pub struct Knobs {
    /// Wait this long before answering.
    pub delay: Duration,
    /// Answer every request `409` with this size (a witness stuck on a stale size).
    pub stale_size: Option<u64>,
    /// Cosign with timestamp 0, which tlog-witness forbids ("MUST NOT be zero").
    pub zero_timestamp: bool,
}

/// A witness's key: Ed25519 (type 0x04) or ML-DSA-44 (type 0x06) cosignatures.
enum Cosigner {
    Ed25519(Box<CosignatureSigner>),
    MlDsa44(MlDsa44Signer),
}

impl Cosigner {
    fn cosign(&self, text: &str, timestamp: u64) -> NoteSignature {
        match self {
            Cosigner::Ed25519(k) => k.cosign(text, timestamp),
            Cosigner::MlDsa44(k) => k.cosign(text, timestamp).unwrap(),
        }
    }
}

struct Shared {
    name: String,
    signer: Cosigner,
    log: NoteVerifier,
    /// The latest cosigned checkpoint: (size, root).
    latest: Mutex<Option<(u64, Hash)>>,
    knobs: Mutex<Knobs>,
    requests: AtomicU64,
    cosigned: AtomicU64,
}

/// A running test witness.
pub struct TestWitness {
    /// Its submission prefix.
    pub url: String,
    /// Its cosigner vkey.
    pub vkey: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestWitness {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestWitness {
    /// Start a witness named `name` (its key name is `<name>.witness.example`) for the
    /// log verified by `log`, with an Ed25519 key.
    pub async fn start(name: &str, log: NoteVerifier) -> TestWitness {
        let (skey, vkey) = generate_cosigner_key(&format!("{name}.witness.example")).unwrap();
        let signer = Cosigner::Ed25519(Box::new(CosignatureSigner::from_skey(&skey).unwrap()));
        Self::start_with(name, log, signer, vkey).await
    }

    /// [`TestWitness::start`] with an ML-DSA-44 key.
    pub async fn start_mldsa44(name: &str, log: NoteVerifier) -> TestWitness {
        let (skey, vkey) = generate_mldsa44_key(&format!("{name}.witness.example")).unwrap();
        let signer = Cosigner::MlDsa44(MlDsa44Signer::from_skey(&skey).unwrap());
        Self::start_with(name, log, signer, vkey).await
    }

    async fn start_with(
        name: &str,
        log: NoteVerifier,
        signer: Cosigner,
        vkey: String,
    ) -> TestWitness {
        let shared = Arc::new(Shared {
            name: name.to_string(),
            signer,
            log,
            latest: Mutex::new(None),
            knobs: Mutex::new(Knobs::default()),
            requests: AtomicU64::new(0),
            cosigned: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .route("/add-checkpoint", axum::routing::post(add_checkpoint))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestWitness {
            url,
            vkey,
            shared,
            task,
        }
    }

    /// The policy line naming this witness.
    pub fn policy_line(&self) -> String {
        format!("witness {} {} {}\n", self.shared.name, self.vkey, self.url)
    }

    /// Change its behaviour.
    pub fn set_knobs(&self, k: Knobs) {
        *self.shared.knobs.lock().unwrap() = k;
    }

    /// The latest checkpoint it cosigned.
    pub fn latest(&self) -> Option<(u64, Hash)> {
        *self.shared.latest.lock().unwrap()
    }

    /// Overwrite its state, as a restore from an old backup would.
    pub fn set_latest(&self, v: Option<(u64, Hash)>) {
        *self.shared.latest.lock().unwrap() = v;
    }

    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Cosignatures given.
    pub fn cosigned(&self) -> u64 {
        self.shared.cosigned.load(Ordering::SeqCst)
    }
}

/// A URL where no witness listens (a witness that is down).
pub fn down_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

fn plain(status: StatusCode, msg: &str) -> Response {
    (status, format!("{msg}\n")).into_response()
}

/// tlog-witness "add-checkpoint", check by check, in the spec's order.
async fn add_checkpoint(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let knobs = s.knobs.lock().unwrap().clone();
    if !knobs.delay.is_zero() {
        tokio::time::sleep(knobs.delay).await;
    }
    let req = match parse_add_checkpoint(&body) {
        Ok(r) => r,
        Err(e) => return plain(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let cp = match Note::parse(&req.checkpoint)
        .ok()
        .and_then(|n| Checkpoint::parse(&n.text).ok())
    {
        Some(cp) => cp,
        None => return plain(StatusCode::BAD_REQUEST, "malformed checkpoint"),
    };
    // Unknown origin: 404. No trusted signature, or a bad one: 403.
    if cp.origin != s.log.name() {
        return plain(StatusCode::NOT_FOUND, "unknown log");
    }
    let note = match open_note(&req.checkpoint, &[&s.log]) {
        Ok(n) => n,
        Err(e) => return plain(StatusCode::FORBIDDEN, &e.to_string()),
    };
    if req.old > cp.size {
        return plain(StatusCode::BAD_REQUEST, "old size beyond the checkpoint");
    }
    // The check of the old size and the update are atomic (the spec's race).
    let mut latest = s.latest.lock().unwrap();
    let (size, root) = match knobs.stale_size {
        Some(stale) => (stale, [0u8; 32]),
        None => latest.unwrap_or((0, empty_root())),
    };
    if req.old != size || knobs.stale_size.is_some() {
        return (
            StatusCode::CONFLICT,
            [(header::CONTENT_TYPE, SIZE_CONTENT_TYPE)],
            format!("{size}\n"),
        )
            .into_response();
    }
    if cp.size == 0 && cp.root != empty_root() {
        return plain(StatusCode::UNPROCESSABLE_ENTITY, "empty tree with a root");
    }
    let consistent = if req.old == 0 {
        req.proof.is_empty()
    } else if req.old == cp.size {
        root == cp.root
    } else {
        verify_consistency(req.old, cp.size, &root, &cp.root, &req.proof).is_ok()
    };
    if !consistent {
        return plain(StatusCode::UNPROCESSABLE_ENTITY, "not consistent");
    }
    *latest = Some((cp.size, cp.root));
    drop(latest);
    let now = match knobs.zero_timestamp {
        true => 0,
        false => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    };
    let sig = s.signer.cosign(&note.text, now);
    let lines = Note {
        text: note.text.clone(),
        signatures: vec![sig],
    }
    .to_bytes()
    .split_off(note.text.len() + 1);
    s.cosigned.fetch_add(1, Ordering::SeqCst);
    (StatusCode::OK, lines).into_response()
}
