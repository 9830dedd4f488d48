//! [`ObjectLog`]: the log over any object store (S3, GCS, memory), shared by any number
//! of frontends, with no database.
//!
//! A backend is only bytes at keys and one conditional write ([`ObjectBackend`]); this
//! module owns the commit protocol and the tile policy, so every object-store adapter
//! is a thin translation of five calls.
//!
//! # Keys
//!
//! * `checkpoint`, `tile/...`: the public tlog-tiles resources, servable straight from
//!   the bucket. Each holds only bytes the committed tree defines for it.
//! * `.tlogd/state`: the state record, the commit point: origin, tree size, root, and
//!   the key of the staged batch that produced it. Only ever replaced by a
//!   compare-and-swap on its version.
//! * `.tlogd/staged/<size>-<root>-<nonce>`: a staged batch: every tile it creates or
//!   changes, with the states before and after it, checksummed. Deleted once a later
//!   state is committed. The nonce makes the key unique to one commit attempt, so a
//!   frontend that lost a race deletes only its own object.
//! * any other key that [`check_blob_key`] accepts (`issuer/<hex SHA-256>`): a
//!   write-once, content-addressed blob ([`LogStorage::put_blob`]), created only if
//!   absent, never rewritten, public and cached as immutable.
//!
//! # Commit protocol (one batch, [`LogStorage::commit`])
//!
//! 1. **Finish the previous batch.** The state record this process last read or wrote
//!    names the staged batch that produced it; if this process has not applied it
//!    (another frontend committed it and may have crashed before uploading its tiles),
//!    [`LogStorage::load_state`] applied it before the engine integrated on top (step
//!    4 below, idempotent).
//! 2. **Stage.** Upload the batch (all its tiles, one object) under a key unique to
//!    this attempt. Nothing public changes; a crash leaves an orphan that nothing
//!    names. Meanwhile step 4 of this process's previous batch may still run; it must
//!    finish before step 3, because the state names only its last batch, so a
//!    frontend recovering from a crash applies only that one: every batch before it
//!    must be public already.
//! 3. **Compare-and-swap the state** from the version holding `prev` to a record of
//!    `next` naming the staged key. This is the commit point: the entries are durable
//!    (staged) and a state containing them is durable. A lost race returns
//!    [`StorageError::Conflict`]; a failed request (reset connection, timeout) is
//!    resolved by reading the record back: it names our staged key (committed), or
//!    anything but `prev` (conflict), or still `prev`. Then the swap may still be on
//!    its way, so the record is *fenced*: rewritten unchanged but for a fresh fence
//!    line, conditional on the version read. Once that lands the swap never can, so
//!    "not committed" is final and the engine's retry, or its 500, is the truth; if
//!    the fence loses its condition instead, the record is read once more.
//! 4. **Apply.** Upload every tile of the batch to its public key, concurrently, retried
//!    and hedged. Their bytes are fixed by the committed tree, so any frontend writing
//!    them (now, or after a crash in step 1) writes identical bytes: a public key is
//!    never rewritten with different bytes. This runs in the background: `commit`
//!    returns after step 3, when the entries are durable (invariant 2), so the engine
//!    acknowledges them while the next batch stages, and a commit costs two round trips
//!    in series instead of three. A checkpoint waits until every tile of its size is
//!    public ([`LogStorage::publish_checkpoint`]; invariant 4), and a failed upload
//!    fails the next commit, which the engine resolves by reloading (step 1).
//! 5. **Clean up**, in the background and best effort: delete the staged object the
//!    previous state named (its tiles were applied before this commit), and the
//!    partial tiles of every tile this batch completed (tlog-tiles "Partial Tiles":
//!    the full tile is readable by then, and readers fall back to it).
//!
//! **Orphans.** A staged object that no state ever named (a crash between steps 2 and
//! 3, a swap whose answer was lost, a best-effort delete that failed) is swept at open
//! and then every [`ObjectLogOptions::sweep_interval`] after a commit: every staged key ending at a size
//! at most the committed size, except the key the state names, goes. Such a batch can
//! never be committed any more: its swap is conditional on the version holding its
//! `prev`, smaller than its `next`, and the state only grows, so that version is gone
//! for good. A batch a state did name at a smaller size was applied before the state
//! moved on (step 2). Keys beyond the committed size are left alone: another frontend
//! may be committing them.
//!
//! **Turns.** Busy frontends of one bucket take turns through a lease object instead of
//! racing batch after batch (see [`turns`]); correctness never depends on it.
//!
//! A partial tile is written for every batch's right edge, so the partial named by any
//! checkpoint (of any frontend) exists until its full tile does.
//!
//! Checkpoints are published by compare-and-swap too, so a frontend that lags never
//! replaces a larger checkpoint with a smaller one.

mod backend;
pub mod memory;
mod turns;

pub use backend::{ObjectBackend, ObjectClass, ObjectVersion, PutCondition, PutOutcome};
pub use turns::SEQUENCER_KEY;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::storage::{CommitBatch, LogStorage, StorageError, TreeState, check_blob_key};
use crate::checkpoint;
use crate::tile::TileId;

/// The key of the public checkpoint (tlog-tiles "Checkpoints").
pub const CHECKPOINT_KEY: &str = "checkpoint";
/// The key of the state record.
pub const STATE_KEY: &str = ".tlogd/state";
/// The prefix of staged batches.
pub const STAGED_PREFIX: &str = ".tlogd/staged/";
/// The prefix of the start-up probe of conditional writes.
const PROBE_PREFIX: &str = ".tlogd/probe/";
const STATE_MAGIC: &str = "tlogd-object-state v1";
const STAGED_MAGIC: &[u8] = b"tlogd-staged-batch v1\n";

/// Tuning of an [`ObjectLog`].
#[derive(Clone, Debug)]
pub struct ObjectLogOptions {
    /// Most object writes in flight at once while applying a batch.
    pub write_concurrency: usize,
    /// A write that has not answered after this long is sent again (a "hedged"
    /// request: object stores have long latency tails); the first answer wins.
    /// Zero: never hedge.
    pub hedge_after: Duration,
    /// How long a failed write is retried, with backoff, before the commit fails.
    pub write_retry: Duration,
    /// How often a frontend that commits sweeps orphaned staged batches (see the
    /// module documentation), besides once at open; each sweep lists
    /// [`STAGED_PREFIX`] once.
    pub sweep_interval: Duration,
    /// How long a frontend keeps the sequencer lease, once several frontends contend,
    /// before it hands it to one that waits (see [`turns`]). Zero: no turns, every
    /// frontend commits whenever it likes and the compare-and-swap sorts them out.
    pub turn: Duration,
}

impl Default for ObjectLogOptions {
    fn default() -> Self {
        ObjectLogOptions {
            write_concurrency: 64,
            hedge_after: Duration::from_millis(500),
            write_retry: Duration::from_secs(10),
            sweep_interval: Duration::from_secs(600),
            turn: Duration::from_millis(250),
        }
    }
}

/// The state record, as stored at [`STATE_KEY`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct StateRecord {
    origin: String,
    state: TreeState,
    /// The staged batch that produced `state` (none for a log adopted or empty).
    staged: Option<String>,
    /// Set when the record was rewritten unchanged to fence off a swap whose answer
    /// was lost (see [`ObjectLog::fence`]): new bytes, so a new version even where the
    /// version is a hash of the content (an S3 `ETag`).
    fence: Option<u64>,
}

impl StateRecord {
    fn encode(&self) -> Bytes {
        let staged = self.staged.as_deref().unwrap_or("-");
        let fence = self
            .fence
            .map_or(String::new(), |f| format!("fence {f:016x}\n"));
        // Last, and only when set: a record of a writable log is what earlier releases
        // wrote, and one they cannot read (six or seven lines) is one they never
        // commit on.
        let frozen = if self.state.frozen { "frozen\n" } else { "" };
        Bytes::from(format!(
            "{STATE_MAGIC}\n{}\n{}\n{}\n{staged}\n{fence}{frozen}",
            self.origin,
            self.state.size,
            B64.encode(self.state.root)
        ))
    }

    fn decode(b: &[u8]) -> Result<Self, StorageError> {
        let bad = |why: &str| StorageError::Corrupt(format!("state record {STATE_KEY}: {why}"));
        let text = std::str::from_utf8(b).map_err(|_| bad("not UTF-8"))?;
        let mut lines: Vec<&str> = text.split('\n').collect();
        let frozen = lines.len() >= 7 && lines[lines.len() - 2] == "frozen";
        if frozen {
            lines.remove(lines.len() - 2);
        }
        let (magic, origin, size, root, staged, fence) = match lines[..] {
            [magic, origin, size, root, staged, ""] => (magic, origin, size, root, staged, None),
            [magic, origin, size, root, staged, fence, ""] => {
                let fence = fence
                    .strip_prefix("fence ")
                    .and_then(|f| u64::from_str_radix(f, 16).ok())
                    .ok_or_else(|| bad("bad fence line"))?;
                (magic, origin, size, root, staged, Some(fence))
            }
            _ => return Err(bad("not five to seven lines")),
        };
        if magic != STATE_MAGIC {
            return Err(bad("unknown format"));
        }
        let size = size.parse().map_err(|_| bad("bad size"))?;
        let root = B64
            .decode(root)
            .ok()
            .and_then(|r| <[u8; 32]>::try_from(r).ok())
            .ok_or_else(|| bad("bad root"))?;
        Ok(StateRecord {
            origin: origin.to_string(),
            state: TreeState { size, root, frozen },
            staged: (staged != "-").then(|| staged.to_string()),
            fence,
        })
    }
}

/// A staged batch: the states around it and its tiles.
struct Staged {
    prev: TreeState,
    next: TreeState,
    tiles: Vec<(TileId, Bytes)>,
}

impl Staged {
    /// A key unique to one commit attempt: two frontends that stage the same batch on
    /// the same tree (the same entries sent to both) produce identical bytes, and with
    /// a shared key the loser's clean-up would delete the object the winner's state
    /// names.
    fn key(next: &TreeState) -> Result<String, StorageError> {
        let mut root = String::with_capacity(64);
        for b in next.root {
            root.push_str(&format!("{b:02x}"));
        }
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| StorageError::Backend(e.to_string()))?;
        Ok(format!(
            "{STAGED_PREFIX}{:020}-{root}-{:016x}",
            next.size,
            u64::from_be_bytes(nonce)
        ))
    }

    fn encode(prev: &TreeState, next: &TreeState, tiles: &[(TileId, Bytes)]) -> Bytes {
        let len: usize = tiles.iter().map(|(_, b)| b.len() + 48).sum();
        let mut out = Vec::with_capacity(STAGED_MAGIC.len() + 80 + 4 + len + 32);
        out.extend_from_slice(STAGED_MAGIC);
        out.extend_from_slice(&prev.to_bytes());
        out.extend_from_slice(&next.to_bytes());
        out.extend_from_slice(&(tiles.len() as u32).to_be_bytes());
        for (id, bytes) in tiles {
            let path = id.path();
            out.extend_from_slice(&(path.len() as u16).to_be_bytes());
            out.extend_from_slice(path.as_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum);
        Bytes::from(out)
    }

    fn decode(key: &str, b: &Bytes) -> Result<Self, StorageError> {
        let bad = |why: &str| StorageError::Corrupt(format!("staged batch {key}: {why}"));
        if b.len() < STAGED_MAGIC.len() + 84 + 32 || !b.starts_with(STAGED_MAGIC) {
            return Err(bad("too short or unknown format"));
        }
        let (body, sum) = b.split_at(b.len() - 32);
        if Sha256::digest(body).as_slice() != sum {
            return Err(bad("checksum mismatch"));
        }
        let at = std::cell::Cell::new(STAGED_MAGIC.len());
        let take = |n: usize| -> Result<&[u8], StorageError> {
            let s = body
                .get(at.get()..at.get() + n)
                .ok_or_else(|| bad("truncated"))?;
            at.set(at.get() + n);
            Ok(s)
        };
        let prev = TreeState::from_bytes(take(40)?).ok_or_else(|| bad("prev"))?;
        let next = TreeState::from_bytes(take(40)?).ok_or_else(|| bad("next"))?;
        let count = u32::from_be_bytes(take(4)?.try_into().map_err(|_| bad("count"))?);
        let mut spans = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let plen = u16::from_be_bytes(take(2)?.try_into().map_err(|_| bad("path"))?);
            let path = std::str::from_utf8(take(plen as usize)?).map_err(|_| bad("path"))?;
            let id = TileId::parse(path).map_err(|e| bad(&e.to_string()))?;
            let blen = u32::from_be_bytes(take(4)?.try_into().map_err(|_| bad("length"))?);
            let start = at.get();
            take(blen as usize)?;
            spans.push((id, start, blen as usize));
        }
        // Zero-copy slices of the one downloaded buffer.
        let tiles = spans
            .into_iter()
            .map(|(id, start, len)| (id, b.slice(start..start + len)))
            .collect();
        Ok(Staged { prev, next, tiles })
    }
}

/// What this process knows of the state record.
struct Known {
    record: Option<StateRecord>,
    /// The version of `record` in the store (`None`: no record exists).
    version: Option<ObjectVersion>,
}

/// Step 4 of one batch, running in the background.
type Upload = JoinHandle<Result<(), StorageError>>;

/// A tlog-tiles log in an object store. See the [module documentation](self) for the
/// protocol.
pub struct ObjectLog<B: ObjectBackend> {
    backend: Arc<B>,
    origin: String,
    options: ObjectLogOptions,
    known: Mutex<Known>,
    /// The staged key whose tiles this process has applied (or knows applied).
    applied: Arc<Mutex<Applied>>,
    /// The largest tree size whose tiles are all at their public keys, as far as this
    /// process knows: a checkpoint waits for it (invariant 4).
    applied_size: Arc<watch::Sender<u64>>,
    /// Step 4 of the last batch this process committed, while it runs: its staged key
    /// and the upload task.
    applying: Mutex<Option<(String, Upload)>>,
    /// When this process last swept orphaned staged batches.
    swept: Mutex<Instant>,
    /// This process's side of the sequencer lease ([`turns`]).
    turns: Mutex<turns::Turns>,
    /// Serializes this process's reads and writes of the lease.
    turn_io: tokio::sync::Mutex<()>,
}

/// Why [`ObjectLog::open`] refused the store.
#[derive(Debug, thiserror::Error)]
pub enum ObjectOpenError {
    /// The store does not honour conditional writes.
    #[error(
        "the object store does not honour conditional writes ({0}); several frontends would fork the log, so tlogd refuses to use it"
    )]
    NoConditionalWrites(String),
    /// The store holds another log.
    #[error("the object store holds the log {found:?}, not {expected:?}")]
    OriginMismatch {
        /// The origin configured.
        expected: String,
        /// The origin stored.
        found: String,
    },
    /// The store failed or holds a corrupt log.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Prove that `backend` honours conditional writes: create-if-absent twice (the second
/// must fail), then replace-if-version twice with the same version (the second must
/// fail). A store that silently ignores conditions would let two frontends both win a
/// compare-and-swap and fork the tree.
pub async fn check_conditional_writes<B: ObjectBackend>(
    backend: &B,
) -> Result<(), ObjectOpenError> {
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| StorageError::Backend(e.to_string()))?;
    let key = format!("{PROBE_PREFIX}{:016x}", u64::from_be_bytes(nonce));
    let probe = |n: &str| Bytes::from(format!("conditional write probe {n}\n"));
    let class = ObjectClass::Private;
    let refuse = |what: &str| Err(ObjectOpenError::NoConditionalWrites(what.to_string()));
    let v1 = match backend
        .put_if(&key, probe("1"), class, PutCondition::Absent)
        .await?
    {
        PutOutcome::Written(v) => v,
        PutOutcome::ConditionFailed => return refuse("create-if-absent of a new key failed"),
    };
    let verdict = async {
        if backend
            .put_if(&key, probe("2"), class, PutCondition::Absent)
            .await?
            != PutOutcome::ConditionFailed
        {
            return refuse("create-if-absent replaced an existing object");
        }
        let PutOutcome::Written(v2) = backend
            .put_if(&key, probe("3"), class, PutCondition::Matches(v1.clone()))
            .await?
        else {
            return refuse("replace-if-version failed with the current version");
        };
        if v2 == v1 {
            return refuse("a replaced object kept its version");
        }
        if backend
            .put_if(&key, probe("4"), class, PutCondition::Matches(v1))
            .await?
            != PutOutcome::ConditionFailed
        {
            return refuse("replace-if-version succeeded with a stale version");
        }
        Ok(())
    }
    .await;
    let _ = backend.delete(&key).await;
    verdict
}

impl<B: ObjectBackend> ObjectLog<B> {
    /// Open the log `origin` in `backend`: prove conditional writes work, check the
    /// stored origin, and finish the last committed batch if its tiles are not all
    /// uploaded.
    pub async fn open(
        backend: B,
        origin: &str,
        options: ObjectLogOptions,
    ) -> Result<Self, ObjectOpenError> {
        check_conditional_writes(&backend).await?;
        let log = ObjectLog {
            backend: Arc::new(backend),
            origin: origin.to_string(),
            options,
            known: Mutex::new(Known {
                record: None,
                version: None,
            }),
            applied: Arc::default(),
            applied_size: Arc::new(watch::Sender::new(0)),
            applying: Mutex::new(None),
            swept: Mutex::new(Instant::now()),
            turns: Mutex::new(turns::Turns::new()?),
            turn_io: tokio::sync::Mutex::new(()),
        };
        match log.read_record().await {
            Ok(record) => {
                // Best effort: a store that lists or deletes badly still serves the log.
                if let Err(e) = sweep_staged(&*log.backend, record.as_ref()).await {
                    tracing::warn!(error = %e, "sweeping orphaned staged batches");
                }
                Ok(log)
            }
            Err(StorageError::Corrupt(why)) if why.starts_with(ORIGIN_MISMATCH) => {
                let found = why[ORIGIN_MISMATCH.len()..].to_string();
                Err(ObjectOpenError::OriginMismatch {
                    expected: origin.to_string(),
                    found,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn known(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember `record` as the stored state record, at `version`.
    fn remember(&self, record: StateRecord, version: ObjectVersion) {
        let mut k = self.known();
        k.record = Some(record);
        k.version = Some(version);
    }

    fn applied(&self) -> MutexGuard<'_, Applied> {
        lock(&self.applied)
    }

    /// Wait until every tile of tree size `size` is public, as far as batches this
    /// process committed go (step 4 runs in the background; sizes others committed
    /// were applied when their state was read). `Ok(true)` if there was an upload to
    /// wait for.
    async fn wait_uploaded(&self, size: u64) -> Result<bool, StorageError> {
        let committed = self.known().record.as_ref().map_or(0, |r| r.state.size);
        let target = size.min(committed);
        let mut applied = self.applied_size.subscribe();
        if *applied.borrow() >= target {
            return Ok(false);
        }
        let wait = self.options.write_retry + Duration::from_secs(1);
        match tokio::time::timeout(wait, applied.wait_for(|&a| a >= target)).await {
            Ok(Ok(_)) => Ok(true),
            _ => Err(StorageError::Backend(format!(
                "the tiles of tree size {size} are not all uploaded yet"
            ))),
        }
    }

    /// Whether a tile that a tree of `size` has may be missing only because its upload
    /// (step 4 of a batch this process committed) is still running. Taken *before* the
    /// read it guards: taken after, an upload that landed between the read and the
    /// check would turn a tile read too early into a 404 (or a "missing" entry) for a
    /// committed tile. A tile beyond the committed tree, or one whose upload is done,
    /// is answered at once (a 404 stays a 404, not a wait for an unrelated upload).
    fn upload_pending(&self, size: u64) -> bool {
        let committed = self.known().record.as_ref().map_or(0, |r| r.state.size);
        size <= committed && *self.applied_size.borrow() < size
    }

    /// Read several objects concurrently: one round trip's latency for all (the
    /// edge is four or five tiles).
    async fn get_all(&self, ids: &[TileId]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        let reads = ids.iter().map(|id| {
            let backend = self.backend.clone();
            let key = id.path();
            tokio::spawn(async move { backend.get(&key).await })
        });
        let handles: Vec<_> = reads.collect();
        let mut out = Vec::with_capacity(ids.len());
        for h in handles {
            let got = h
                .await
                .map_err(|e| StorageError::Backend(format!("read task: {e}")))??;
            out.push(got.map(|b| b.to_vec()));
        }
        Ok(out)
    }

    /// Wait for step 4 of the batch this process committed last: the next commit point
    /// may only name a batch on top of a tree whose tiles are all public, because a
    /// frontend recovering after a crash applies only the batch the state names.
    async fn finish_applying(&self) -> Result<(), StorageError> {
        let Some((_, handle)) = lock(&self.applying).take() else {
            return Ok(());
        };
        match handle.await {
            Ok(r) => r,
            Err(e) => Err(StorageError::Backend(format!("tile upload task: {e}"))),
        }
    }

    /// Read the state record, remember it with its version, and apply the staged batch
    /// it names unless this process knows it is applied (protocol step 1).
    async fn read_record(&self) -> Result<Option<StateRecord>, StorageError> {
        // A staged batch may be deleted by a frontend that committed after the record
        // we read: then the record has moved on, and we read it again.
        for _ in 0..16 {
            let (record, version) = match self.backend.get_versioned(STATE_KEY).await? {
                None => (None, None),
                Some((bytes, v)) => (Some(StateRecord::decode(&bytes)?), Some(v)),
            };
            if let Some(r) = &record
                && r.origin != self.origin
            {
                return Err(StorageError::Corrupt(format!(
                    "{ORIGIN_MISMATCH}{}",
                    r.origin
                )));
            }
            let staged = record.as_ref().and_then(|r| r.staged.clone());
            if let Some(key) = &staged
                && lock(&self.applying).as_ref().is_some_and(|(k, _)| k == key)
            {
                // Our own upload of it is under way: wait for it rather than upload
                // it twice. If it failed, it is applied below.
                let _ = self.finish_applying().await;
            }
            if let Some(key) = staged
                && !self.applied().is(&key)
            {
                match self.backend.get(&key).await? {
                    Some(bytes) => {
                        let batch = Staged::decode(&key, &bytes)?;
                        // A frozen record names the batch that ended the tree: the
                        // same tree, frozen since (`swap_frozen`).
                        let ends_here = record
                            .as_ref()
                            .is_some_and(|r| r.state.same_tree(&batch.next));
                        if !ends_here || batch.prev.size > batch.next.size {
                            return Err(StorageError::Corrupt(format!(
                                "staged batch {key} does not end at the committed state"
                            )));
                        }
                        apply_tiles(&self.backend, &self.options, &batch.tiles).await?;
                        self.applied().advance(batch.next.size, &key);
                        // Step 5 for a batch its committer did not finish (it crashed,
                        // or is slow): its completed tiles' partials go too.
                        clean_up(self.backend.clone(), None, completed_tiles(&batch.tiles));
                    }
                    None => {
                        let now = self.backend.get_versioned(STATE_KEY).await?;
                        if now.as_ref().map(|(_, v)| v) != version.as_ref() {
                            continue;
                        }
                        return Err(StorageError::Corrupt(format!(
                            "the committed state names the staged batch {key}, which is missing"
                        )));
                    }
                }
            }
            // Every tile of this state is public now: applied above, by us earlier, or
            // by whoever committed it.
            let size = record.as_ref().map_or(0, |r| r.state.size);
            self.applied_size.send_modify(|a| *a = (*a).max(size));
            let mut known = self.known();
            known.record = record.clone();
            known.version = version;
            return Ok(record);
        }
        Err(StorageError::Backend(
            "the state record kept changing while it was read".into(),
        ))
    }

    /// Protocol step 3: compare-and-swap the state record from `prev` to `next`.
    async fn swap_state(
        &self,
        prev: TreeState,
        next: TreeState,
        staged: &str,
    ) -> Result<(), StorageError> {
        let (record, version) = {
            let k = self.known();
            (k.record.clone(), k.version.clone())
        };
        let stored = record.as_ref().map_or(TreeState::empty(), |r| r.state);
        if stored != prev {
            // Our view is stale (another frontend committed since we read it) or the
            // engine is behind: the engine reloads and re-integrates. No swap was sent,
            // so nothing will ever name what we staged.
            self.delete_unnamed(staged);
            self.note_contention(true);
            return Err(StorageError::Conflict {
                expected: prev.size,
                found: stored.size,
            });
        }
        let new = StateRecord {
            origin: self.origin.clone(),
            state: next,
            staged: Some(staged.to_string()),
            fence: None,
        };
        let condition = match version {
            Some(v) => PutCondition::Matches(v),
            None => PutCondition::Absent,
        };
        let outcome = self
            .backend
            .put_if(STATE_KEY, new.encode(), ObjectClass::Private, condition)
            .await;
        match outcome {
            Ok(PutOutcome::Written(v)) => {
                self.remember(new, v);
                Ok(())
            }
            // Our own definite 412: another frontend's swap won, ours never lands, and
            // nothing will ever name what we staged. The one exception, checked on
            // the record read anyway for the conflict's size: a client that retried our
            // request after it had landed (the record names our staged key).
            Ok(PutOutcome::ConditionFailed) => match self.read_versioned_record().await? {
                Some((r, v)) if r.staged.as_deref() == Some(staged) => {
                    self.remember(r, v);
                    Ok(())
                }
                found => {
                    self.delete_unnamed(staged);
                    self.note_contention(true);
                    Err(StorageError::Conflict {
                        expected: prev.size,
                        found: found.map_or(0, |(r, _)| r.state.size),
                    })
                }
            },
            // The request failed: it may have taken effect, or still be on its way.
            // Learn which by reading the record back; if that fails too, the swap may
            // still land (unsettled) and the engine resolves it by reloading.
            Err(e) => {
                let found = match self.read_versioned_record().await {
                    Ok(found) => found,
                    Err(e2) => {
                        return Err(StorageError::Unsettled(format!(
                            "{e}; reading the state back: {e2}"
                        )));
                    }
                };
                match LostSwap::judge(found, prev, next, staged, &e) {
                    LostSwap::Ours(r, v) => {
                        self.remember(r, v);
                        Ok(())
                    }
                    // Still `prev`: the swap did not land yet, and may yet.
                    LostSwap::StillPrev(found) => self.fence(prev, next, found, staged, e).await,
                    LostSwap::Moved(error) => {
                        self.note_contention(true);
                        Err(error)
                    }
                }
            }
        }
    }

    /// Freeze the log ([`LogStorage`]'s contract: a commit of no tiles): the state
    /// record rewritten with the frozen flag, conditional on the version holding
    /// `prev`, naming the same staged batch (a frontend recovering from a crash still
    /// applies it). Nothing is staged. A failed request is reported as such: the engine
    /// reads the state back, and a freeze is idempotent (landing late, it sets what the
    /// engine's retry sets, on the same condition).
    async fn swap_frozen(&self, prev: TreeState, next: TreeState) -> Result<(), StorageError> {
        let (record, version) = {
            let k = self.known();
            (k.record.clone(), k.version.clone())
        };
        let stored = record.as_ref().map_or(TreeState::empty(), |r| r.state);
        if stored != prev {
            return Err(StorageError::Conflict {
                expected: prev.size,
                found: stored.size,
            });
        }
        let new = StateRecord {
            state: next,
            fence: None,
            ..record.unwrap_or_else(|| StateRecord {
                origin: self.origin.clone(),
                state: next,
                staged: None,
                fence: None,
            })
        };
        let condition = match version {
            Some(v) => PutCondition::Matches(v),
            None => PutCondition::Absent,
        };
        match self
            .backend
            .put_if(STATE_KEY, new.encode(), ObjectClass::Private, condition)
            .await?
        {
            PutOutcome::Written(v) => {
                self.remember(new, v);
                Ok(())
            }
            PutOutcome::ConditionFailed => match self.read_versioned_record().await? {
                Some((r, v)) if r.state == next => {
                    self.remember(r, v);
                    Ok(())
                }
                found => Err(StorageError::Conflict {
                    expected: prev.size,
                    found: found.map_or(0, |(r, _)| r.state.size),
                }),
            },
        }
    }

    /// The stored state record and its version, without applying anything or updating
    /// what we know.
    async fn read_versioned_record(
        &self,
    ) -> Result<Option<(StateRecord, ObjectVersion)>, StorageError> {
        self.backend
            .get_versioned(STATE_KEY)
            .await?
            .map(|(b, v)| StateRecord::decode(&b).map(|r| (r, v)))
            .transpose()
    }

    /// Delete, in the background, a staged batch that no state names and none ever
    /// will.
    fn delete_unnamed(&self, staged: &str) {
        clean_up(self.backend.clone(), Some(staged.to_string()), Vec::new());
    }

    /// After a swap whose answer was lost finds the record still at `prev` (at
    /// `found`, or absent): rewrite that record unchanged but for a fresh fence, on
    /// the condition that it is still the version read. The swap in flight was
    /// conditional on that version, so once the fence is written the swap can never
    /// land, and "not committed" is final: the adds are answered as not logged only
    /// when they are not, and are never logged later behind the client's back. If the
    /// fence loses its condition, something landed first; reading once more tells
    /// whether it was this swap. Returns the error to report for the swap.
    async fn fence(
        &self,
        prev: TreeState,
        next: TreeState,
        found: Option<(StateRecord, ObjectVersion)>,
        staged: &str,
        swap_error: StorageError,
    ) -> Result<(), StorageError> {
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| StorageError::Backend(e.to_string()))?;
        let (fenced, condition) = match found {
            Some((r, v)) => (
                StateRecord {
                    fence: Some(u64::from_be_bytes(nonce)),
                    ..r
                },
                PutCondition::Matches(v),
            ),
            // The record is gone, yet the tree had entries: something deleted it.
            // Writing `prev` back would stand a record up from this process's memory.
            None if prev != TreeState::empty() => {
                return Err(StorageError::Corrupt(format!(
                    "state record {STATE_KEY} is missing, yet the tree was at size {} \
                     ({swap_error})",
                    prev.size
                )));
            }
            // A first commit (`prev` is the empty tree): the record of the empty
            // tree, created if still absent.
            None => (
                StateRecord {
                    origin: self.origin.clone(),
                    state: prev,
                    staged: None,
                    fence: Some(u64::from_be_bytes(nonce)),
                },
                PutCondition::Absent,
            ),
        };
        let outcome = self
            .backend
            .put_if(STATE_KEY, fenced.encode(), ObjectClass::Private, condition)
            .await;
        match outcome {
            Ok(PutOutcome::Written(v)) => {
                self.remember(fenced, v);
                Err(StorageError::Backend(format!(
                    "{swap_error}; the state was fenced at size {}: batch not committed",
                    prev.size
                )))
            }
            Ok(PutOutcome::ConditionFailed) => match self.read_versioned_record().await {
                Ok(found) => match LostSwap::judge(found, prev, next, staged, &swap_error) {
                    LostSwap::Ours(r, v) => {
                        self.remember(r, v);
                        Ok(())
                    }
                    // Rewritten at `prev` by another frontend's fence: a new version, so
                    // our swap, conditional on the old one, can never land.
                    LostSwap::StillPrev(_) => Err(StorageError::Backend(format!(
                        "{swap_error}; the state was fenced at size {}: batch not committed",
                        prev.size
                    ))),
                    LostSwap::Moved(error) => Err(error),
                },
                Err(e2) => Err(StorageError::Unsettled(format!(
                    "{swap_error}; reading the state back after a failed fence: {e2}"
                ))),
            },
            // Unfenced: the swap may still land; the engine keeps checking for it.
            Err(e2) => Err(StorageError::Unsettled(format!(
                "{swap_error}; fencing the state: {e2}"
            ))),
        }
    }
}

const ORIGIN_MISMATCH: &str = "origin mismatch: ";

/// The newest staged batch whose tiles this process has applied (or knows applied):
/// its size and key. It only moves forward: an upload finishing late never replaces
/// a newer batch read and applied meanwhile.
#[derive(Default)]
struct Applied(Option<(u64, String)>);

impl Applied {
    fn is(&self, key: &str) -> bool {
        self.0.as_ref().is_some_and(|(_, k)| k == key)
    }

    fn advance(&mut self, size: u64, key: &str) {
        if self.0.as_ref().is_none_or(|(s, _)| *s <= size) {
            self.0 = Some((size, key.to_string()));
        }
    }
}

/// The tiles of a batch that are full: their partials are garbage once they are public.
fn completed_tiles(tiles: &[(TileId, Bytes)]) -> Vec<TileId> {
    tiles
        .iter()
        .filter(|(id, _)| id.is_full())
        .map(|(id, _)| *id)
        .collect()
}

/// What the state record, read back after a swap `prev` → `next` whose answer was lost,
/// says of that swap.
enum LostSwap {
    /// It names our staged batch: the swap landed (the record may carry a fence line
    /// another frontend added since).
    Ours(StateRecord, ObjectVersion),
    /// Still at `prev` (or absent): the swap did not land yet, and may yet.
    StillPrev(Option<(StateRecord, ObjectVersion)>),
    /// Another frontend's record: the error the swap returns. Neither kind deletes the
    /// staged batch (only our own definite 412 may; another frontend may still be
    /// applying it, and the sweep collects it).
    ///
    /// * At least `next`'s size: that frontend may have committed on top of our
    ///   landed swap (after reading it and applying our staged batch), and only the
    ///   stored tree can tell (its root at `next.size` is `next.root` or not): a
    ///   settled [`StorageError::Backend`], not a conflict, so the engine reads the
    ///   tree back and acknowledges the batch if it is there (re-appending it would log
    ///   it twice).
    /// * Below `next`'s size: our swap is not under it and, conditional on a version
    ///   that is gone for good, never will be: [`StorageError::Conflict`].
    Moved(StorageError),
}

impl LostSwap {
    fn judge(
        found: Option<(StateRecord, ObjectVersion)>,
        prev: TreeState,
        next: TreeState,
        staged: &str,
        swap_error: &StorageError,
    ) -> Self {
        match found {
            Some((r, v)) if r.staged.as_deref() == Some(staged) => LostSwap::Ours(r, v),
            Some((r, _)) if r.state != prev && r.state.size >= next.size => {
                LostSwap::Moved(StorageError::Backend(format!(
                    "{swap_error}; the state has moved on to size {}: whether the batch is \
                     in it is read from the tree",
                    r.state.size
                )))
            }
            Some((r, _)) if r.state != prev => LostSwap::Moved(StorageError::Conflict {
                expected: prev.size,
                found: r.state.size,
            }),
            found => LostSwap::StillPrev(found),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Upload tiles to their public keys: concurrently, each retried and hedged.
async fn apply_tiles<B: ObjectBackend>(
    backend: &Arc<B>,
    options: &ObjectLogOptions,
    tiles: &[(TileId, Bytes)],
) -> Result<(), StorageError> {
    let mut set = JoinSet::new();
    let mut first_error = None;
    for (id, bytes) in tiles {
        if set.len() >= options.write_concurrency.max(1)
            && let Some(r) = set.join_next().await
        {
            note_error(&mut first_error, r);
        }
        let backend = backend.clone();
        let options = options.clone();
        let (key, bytes) = (id.path(), bytes.clone());
        set.spawn(async move {
            put_reliably(&*backend, &options, &key, bytes, ObjectClass::Tile).await
        });
    }
    while let Some(r) = set.join_next().await {
        note_error(&mut first_error, r);
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Delete every staged batch that no state can name any more: those ending at a size
/// at most `record`'s, except the one it names (see "Orphans" in the module
/// documentation). Keys that are not a staged batch's are left alone. Returns how
/// many were deleted.
async fn sweep_staged<B: ObjectBackend>(
    backend: &B,
    record: Option<&StateRecord>,
) -> Result<usize, StorageError> {
    let Some(record) = record else {
        return Ok(0);
    };
    let mut deleted = 0;
    for key in backend.list(STAGED_PREFIX).await? {
        let ends_at = key
            .strip_prefix(STAGED_PREFIX)
            .and_then(|rest| rest.get(..20))
            .and_then(|size| size.parse::<u64>().ok());
        let Some(ends_at) = ends_at else {
            continue;
        };
        if ends_at <= record.state.size && record.staged.as_deref() != Some(key.as_str()) {
            backend.delete(&key).await?;
            deleted += 1;
        }
    }
    if deleted > 0 {
        tracing::info!(
            deleted,
            size = record.state.size,
            "deleted orphaned staged batches"
        );
    }
    Ok(deleted)
}

/// Protocol step 5, in the background.
fn clean_up<B: ObjectBackend>(backend: Arc<B>, superseded: Option<String>, completed: Vec<TileId>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        if let Some(key) = superseded
            && let Err(e) = backend.delete(&key).await
        {
            tracing::debug!(error = %e, %key, "deleting a superseded staged batch");
        }
        for id in completed {
            let full = id.path();
            let prefix = format!("{full}.p/");
            match backend.list(&prefix).await {
                Ok(keys) => {
                    for key in keys {
                        if let Err(e) = backend.delete(&key).await {
                            tracing::debug!(error = %e, %key, "deleting a partial tile");
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, %prefix, "listing partial tiles"),
            }
        }
    });
}

fn note_error(
    first: &mut Option<StorageError>,
    r: Result<Result<(), StorageError>, tokio::task::JoinError>,
) {
    let e = match r {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(e) => StorageError::Backend(format!("upload task: {e}")),
    };
    first.get_or_insert(e);
}

/// One write, retried with backoff for `options.write_retry`, each attempt hedged.
/// Only for writes whose bytes are fixed (tiles, staged batches): repeating them is
/// harmless.
async fn put_reliably<B: ObjectBackend>(
    backend: &B,
    options: &ObjectLogOptions,
    key: &str,
    bytes: Bytes,
    class: ObjectClass,
) -> Result<(), StorageError> {
    let deadline = Instant::now() + options.write_retry;
    let mut backoff = Duration::from_millis(25);
    loop {
        match put_hedged(backend, options.hedge_after, key, bytes.clone(), class).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() + backoff < deadline => {
                metrics::counter!("tlogd_object_write_retries_total", "backend" => backend.backend_name())
                    .increment(1);
                tracing::debug!(error = %e, %key, "object write failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A write that is sent a second time if the first has not answered after `hedge`;
/// the first success wins (both carry the same bytes).
async fn put_hedged<B: ObjectBackend>(
    backend: &B,
    hedge: Duration,
    key: &str,
    bytes: Bytes,
    class: ObjectClass,
) -> Result<(), StorageError> {
    let first = backend.put(key, bytes.clone(), class);
    tokio::pin!(first);
    if hedge.is_zero() {
        return first.await;
    }
    let early = tokio::time::timeout(hedge, &mut first).await;
    if let Ok(r) = early {
        return r;
    }
    metrics::counter!("tlogd_object_write_hedges_total", "backend" => backend.backend_name())
        .increment(1);
    let second = backend.put(key, bytes, class);
    tokio::pin!(second);
    tokio::select! {
        r = &mut first => match r {
            Ok(()) => Ok(()),
            Err(_) => second.await,
        },
        r = &mut second => match r {
            Ok(()) => Ok(()),
            Err(_) => first.await,
        },
    }
}

impl<B: ObjectBackend> LogStorage for ObjectLog<B> {
    fn backend_name(&self) -> &'static str {
        self.backend.backend_name()
    }

    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        Ok(self.read_record().await?.map(|r| r.state))
    }

    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        let CommitBatch { prev, next, tiles } = batch;
        if tiles.is_empty() && next.frozen && next.same_tree(&prev) {
            return self.swap_frozen(prev, next).await;
        }
        let tiles: Vec<(TileId, Bytes)> = tiles
            .into_iter()
            .map(|(id, b)| (id, Bytes::from(b)))
            .collect();
        let superseded = self.known().record.as_ref().and_then(|r| r.staged.clone());
        // Step 2: stage.
        let key = Staged::key(&next)?;
        let staged = Staged::encode(&prev, &next, &tiles);
        // No compare-and-swap names this attempt's key until step 3 is sent, so until
        // then a failure may delete what it staged (after a swap whose answer was lost,
        // it may not: the request could still land).
        if let Err(e) = put_reliably(
            &*self.backend,
            &self.options,
            &key,
            staged,
            ObjectClass::Private,
        )
        .await
        {
            self.delete_unnamed(&key);
            return Err(e);
        }
        // The previous batch's step 4 ran while this one staged; it must be done
        // before this commit point (see `finish_applying`). Its failure fails this
        // commit: the engine resolves it by reloading the state, which applies that
        // batch (step 1) and finds this one uncommitted.
        if let Err(e) = self.finish_applying().await {
            self.delete_unnamed(&key);
            return Err(e);
        }
        // Step 3: the commit point. A swap lost for sure deletes what it staged.
        self.swap_state(prev, next, &key).await?;
        // Step 4, in the background: the entries are durable (staged, and named by the
        // committed state), so the engine acknowledges them now, and the next batch
        // stages while these tiles upload. A checkpoint for this size waits for them
        // (`publish_checkpoint`), and so does the next commit point.
        let completed = completed_tiles(&tiles);
        let (backend, options) = (self.backend.clone(), self.options.clone());
        let (applied, applied_size) = (self.applied.clone(), self.applied_size.clone());
        // Orphans, now and then, after this batch's own upload (it must not slow the
        // commit, and the record it sweeps against is the one just committed).
        let sweep = {
            let mut swept = lock(&self.swept);
            (swept.elapsed() >= self.options.sweep_interval).then(|| {
                *swept = Instant::now();
                StateRecord {
                    origin: self.origin.clone(),
                    state: next,
                    staged: Some(key.clone()),
                    fence: None,
                }
            })
        };
        let applying_key = key.clone();
        let applying = tokio::spawn(async move {
            apply_tiles(&backend, &options, &tiles).await?;
            lock(&applied).advance(next.size, &key);
            applied_size.send_modify(|a| *a = (*a).max(next.size));
            // Step 5.
            clean_up(backend.clone(), superseded, completed);
            if let Some(record) = sweep {
                // Detached: the next commit point waits for this task, not for a sweep.
                tokio::spawn(async move {
                    if let Err(e) = sweep_staged(&*backend, Some(&record)).await {
                        tracing::warn!(error = %e, "sweeping orphaned staged batches");
                    }
                });
            }
            Ok(())
        });
        *lock(&self.applying) = Some((applying_key, applying));
        Ok(())
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        let key = id.path();
        let size = id.min_tree_size();
        let pending = self.upload_pending(size);
        if let Some(b) = self.backend.get(&key).await? {
            return Ok(Some(b.to_vec()));
        }
        if !pending {
            return Ok(None);
        }
        // A wait that times out is an error (the tile is committed but not readable),
        // not a 404.
        self.wait_uploaded(size).await?;
        Ok(self.backend.get(&key).await?.map(|b| b.to_vec()))
    }

    async fn read_tiles(&self, ids: &[TileId]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        // Which tiles may be missing only for an upload in flight, taken before the
        // reads (see `upload_pending`).
        let pending: Vec<bool> = ids
            .iter()
            .map(|id| self.upload_pending(id.min_tree_size()))
            .collect();
        let mut out = self.get_all(ids).await?;
        let wait_for = ids
            .iter()
            .zip(&out)
            .zip(&pending)
            .filter(|((_, got), pending)| got.is_none() && **pending)
            .map(|((id, _), _)| id.min_tree_size())
            .max();
        if let Some(size) = wait_for {
            self.wait_uploaded(size).await?;
            out = self.get_all(ids).await?;
        }
        Ok(out)
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        let size = checkpoint::signed_size(signed)
            .ok_or_else(|| StorageError::Corrupt("checkpoint without a size line".into()))?;
        // Invariant 4: only a size whose tiles are all public.
        self.wait_uploaded(size).await?;
        let bytes = Bytes::copy_from_slice(signed);
        // Compare-and-swap, so that a frontend publishing a smaller tree never
        // replaces a larger one.
        for _ in 0..16 {
            let current = self.backend.get_versioned(CHECKPOINT_KEY).await?;
            let condition = match current {
                Some((old, _)) if checkpoint::signed_size(&old).is_some_and(|s| s > size) => {
                    return Ok(());
                }
                Some((old, _)) if old == bytes => return Ok(()),
                Some((_, v)) => PutCondition::Matches(v),
                None => PutCondition::Absent,
            };
            match self
                .backend
                .put_if(
                    CHECKPOINT_KEY,
                    bytes.clone(),
                    ObjectClass::Checkpoint,
                    condition,
                )
                .await?
            {
                PutOutcome::Written(_) => return Ok(()),
                PutOutcome::ConditionFailed => continue,
            }
        }
        Err(StorageError::Backend(
            "the checkpoint kept changing while it was published".into(),
        ))
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.backend.get(CHECKPOINT_KEY).await?.map(|b| b.to_vec()))
    }

    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        content_type: &'static str,
    ) -> Result<(), StorageError> {
        check_blob_key(key)?;
        let bytes = Bytes::copy_from_slice(bytes);
        let class = ObjectClass::Blob { content_type };
        let deadline = Instant::now() + self.options.write_retry;
        let mut backoff = Duration::from_millis(25);
        loop {
            // Create-if-absent, so a blob is never replaced: a plain put would let
            // other bytes overwrite it, and a CDN may have cached the first ones.
            let error = match self
                .backend
                .put_if(key, bytes.clone(), class, PutCondition::Absent)
                .await
            {
                Ok(PutOutcome::Written(_)) => return Ok(()),
                Ok(PutOutcome::ConditionFailed) => None,
                Err(e) => Some(e),
            };
            // The key exists, or the write's outcome is unknown (it may have landed,
            // or still land): what is stored decides.
            let error = match self.backend.get(key).await {
                Ok(Some(stored)) if stored == bytes => return Ok(()),
                Ok(Some(stored)) => {
                    return Err(StorageError::Corrupt(format!(
                        "blob {key} already holds other bytes ({} bytes, not these {})",
                        stored.len(),
                        bytes.len()
                    )));
                }
                // Absent after a failed condition: a racing create (S3's 409) that had
                // not landed yet when read. Absent after an error: not written (yet).
                Ok(None) => error.unwrap_or_else(|| {
                    StorageError::Backend(format!(
                        "blob {key}: create-if-absent failed but nothing is stored"
                    ))
                }),
                Err(e) => e,
            };
            if Instant::now() + backoff >= deadline {
                return Err(error);
            }
            tracing::debug!(error = %error, %key, "blob write failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        check_blob_key(key)?;
        Ok(self.backend.get(key).await?.map(|b| b.to_vec()))
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        // Reading the commit point proves the store answers; a write probe per
        // readiness check would cost a PUT per frontend per probe.
        self.backend.get_versioned(STATE_KEY).await.map(|_| ())
    }

    async fn acquire_sequencer(&self) -> Result<(), StorageError> {
        self.take_turn().await
    }

    async fn release_sequencer(&self, idle: bool) {
        self.end_turn(idle).await
    }

    fn check_state_before_commit(&self) -> bool {
        // Only when the lease was just taken from another frontend, which has surely
        // moved the tree: otherwise a GET of the state per batch would cost the round
        // trip a conflict costs, and the compare-and-swap catches a stale tree anyway.
        self.take_fresh()
    }

    fn reads_are_committed(&self) -> bool {
        // Public keys only ever hold committed bytes (step 4 runs after step 3), so
        // every frontend serves what any frontend committed.
        true
    }
}

#[cfg(test)]
mod tests;
