//! The generic sequencing engine: queue → integrator → publisher, over [`LogStorage`].
//!
//! # Durability protocol
//!
//! One integrator task owns the in-memory right edge of the tree ([`TileTree`] plus the
//! partial entry bundle) and commits batches one at a time ("group commit": while one
//! batch commits, the next accumulates; an idle integrator takes a lone entry at once).
//! For every batch:
//!
//! 1. **Lock and read.** Take the store's sequencing lock
//!    ([`LogStorage::acquire_sequencer`]; a no-op for single-writer stores) and read the
//!    committed state. If another frontend advanced it, reload the edge from storage.
//!    A stored state behind the one this process saw committed (rolled back or
//!    deleted behind the log's back) is refused: nothing is committed on it.
//!    A busy integrator keeps the lock from batch to batch (no other frontend can
//!    commit meanwhile, so no re-read is needed) for at most `SEQUENCER_SLICE`, and
//!    releases it when its queue is empty.
//! 2. **Integrate in memory.** The batch gets its indices and one timestamp (never
//!    below the newest entry's); the log's [`Personality`] encodes each entry into its
//!    bundle and gives its leaf hash; the leaves are appended to the right edge,
//!    producing every changed hash tile and entry bundle and the new root. No storage
//!    reads.
//! 3. **Stage and compare-and-swap** ([`LogStorage::commit`]). The backend makes every
//!    tile durable, then atomically advances the tree state from `prev` to `next`. The
//!    state is the commit point.
//! 4. **Acknowledge.** Only now does any `add` of the batch resolve to an index.
//! 5. **Index.** The batch's entry hashes go to the dedup follower, which writes them
//!    to the persistent index in batches, off the commit path.
//! 6. **Publish.** The publisher signs a checkpoint for the latest committed state at
//!    most once per checkpoint interval and stores it; a checkpoint never names a state
//!    that is not durable.
//!
//! If step 3 fails, the outcome is uncertain ("fail but persist" or not), so the
//! integrator reads the stored tree back until it can tell: the stored state is the
//! batch's `next` (persisted: acknowledged), smaller than `next` (not persisted: the
//! batch is retried from step 1 with backoff for up to [`LogConfig::commit_retry`],
//! then its adds fail with HTTP 500, nothing logged, or 503 on a frontend that
//! forwards: see `failed_answer`), or larger (another frontend
//! committed on top: the batch persisted iff the stored tree at `next.size` has
//! `next.root`). "Not persisted" is only what the read saw: a commit still in flight
//! (a `COMMIT` on a cut connection reaching the database after the read, a
//! conditional write landing late) can persist afterwards, so every later attempt of
//! the batch that finds the tree grown first checks, the same way, whether the growth
//! is one of its own earlier attempts, and acknowledges that one instead of
//! appending the batch again. If storage cannot be read for the whole retry time, or
//! the retry time runs out while an attempt may still land
//! ([`StorageError::Unsettled`]: its request could not be fenced off), the adds are
//! answered [`AddError::Uncertain`] (HTTP 503: resubmit) and the batch becomes an
//! **open outcome**: state of this frontend, not of the batch, kept until a read of
//! the tree proves an attempt of it landed (its entries are logged at its indices) or
//! that none can land any more (each was settled, or built on a state the tree has
//! since moved off: a compare-and-swap from it can never succeed, and a database
//! transaction on it has ended, since the tree moved under its lock), or the process
//! restarts. **Every later commit first checks the tree it builds on against the open
//! outcomes** (a late `COMMIT` lands before it, or its swap conflicts and the reload
//! finds it), and a swap of ours closes them all: a batch is never appended twice.
//! While one is open its entries stay in flight (`InFlight::Uncertain`): a
//! resubmission (dedup on) waits briefly for the outcome and is answered its index,
//! queued (it never landed) or 503 again, never queued for a second index. While
//! storage cannot be read at all no batch commits, and those behind are answered 503
//! too: no "not logged" (500) while an outcome is open. On
//! [`StorageError::Conflict`] (another frontend advanced the tree; definite: that
//! attempt never lands) the batch is
//! re-integrated on the reloaded edge at once.
//!
//! **Freezing** ([`Log::freeze`]) is one more commit through the same steps: adds are
//! refused from the moment it is asked for, the batches already queued commit first,
//! then, under the sequencing lock and on a freshly read state, a batch of no tiles
//! swaps the state to itself with [`TreeState::frozen`] set. A commit of another
//! frontend racing it loses its swap and reloads into the frozen state (step 1), which
//! no batch is ever integrated on; the publisher then signs the final checkpoint as
//! for any commit.
//!
//! A background task that panics stops the log ([`Log::failed`]): queued adds are
//! answered with an error, new ones refused, `/readyz` fails, and the daemon exits;
//! restarting re-reads storage, the only source of truth.
//!
//! # Invariants, for every backend
//!
//! 1. A public path (`checkpoint`, `tile/...`) only ever holds the bytes the committed
//!    tree defines for it: never bytes of an uncommitted batch, never rewritten with
//!    different bytes (the checkpoint only ever moves forward).
//! 2. An index is acknowledged only when the entry and a tree state containing it are
//!    durable.
//! 3. No batch is ever logged twice (uncertain commits are resolved by reading).
//! 4. A checkpoint is published only for a size whose tiles are all readable, and every
//!    partial tile a published checkpoint names stays readable until its full tile
//!    exists (tlog-tiles "Partial Tiles").
//!
//! How each backend keeps them: [`objects::ObjectLog`] (S3, GCS, memory; any number of
//! frontends) stages the batch under a unique key, compares-and-swaps the state record
//! naming it (the adds are acknowledged here), then uploads the public tiles, whose
//! bytes the committed tree now fixes, while the next batch stages; checkpoints wait
//! for the uploads, and any frontend finishes a committed-but-unapplied batch first; the SQL backends
//! write tiles and state in one transaction; the POSIX backend (one writer) stages
//! full tiles privately and renames them into place after its state commits.

mod cosign;
mod dedup;
mod edge;
pub mod forward;
mod indexer;
mod latest;
mod outcome;
mod publish;
mod queue;
mod served;
mod storage;
pub mod versioned;

pub use cosign::{BoxFuture, CheckpointCosigner, ConsistencyProver, StorageProver, read_hashes};
pub use dedup::{DedupError, DedupIndex, EntryHash, Indexed, entry_hash};
pub use forward::{ForwardError, ForwardedOutcome, Forwarder};
pub use publish::GREASE_NAME;
pub use served::ServedLog;
pub use storage::{CommitBatch, LogStorage, MAX_BLOB_KEY, StorageError, TreeState, check_blob_key};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use crate::checkpoint::Checkpoint;
use crate::hash::Hash;
use crate::merkle::TileTree;
use crate::note::{LogSigner, NoteSigner, NoteVerifier};
use crate::personality::{EntryError, Personality, TlogTiles};
use crate::tile::{self, TILE_WIDTH, TileId, TileKind};
use edge::Edge;
use indexer::ToIndex;
use outcome::{Attempt, Resolved, Unresolved, holds};
use queue::{InFlight, PendingBatch, Placed, Placement, Pushed, Queue, QueueLimits, Uncertainty};

/// Tuning and identity of one log.
#[derive(Clone)]
pub struct LogConfig {
    /// The checkpoint origin line (tlog-checkpoint "Note text").
    pub origin: String,
    /// The log's short name, the `log` label of every metric it records (a daemon
    /// serving several logs names each; `""` by default).
    pub name: String,
    /// The log's checkpoint signers: each signs every checkpoint, in this order. The
    /// first is the key the log is known by ([`LogConfig::verifier`]); a stored
    /// checkpoint opens if any of them verifies it (a key being rotated in or out).
    pub signers: Vec<Arc<dyn LogSigner>>,
    /// What the log's entries are: validation, what is stored and hashed, the bundle
    /// path and codec, the dedup key ([`TlogTiles`] by default).
    pub personality: Arc<dyn Personality>,
    /// Largest batch committed at once.
    pub batch_max_entries: usize,
    /// How long an idle integrator lingers for more entries before committing a batch
    /// that is not full. Zero: commit at once (a lone entry never waits for a timer).
    pub batch_max_age: Duration,
    /// Under load, start commits at most this often: a batch that is not full waits
    /// until this long after the previous commit started, unless it already holds as
    /// many entries as were waiting when that commit ended (every writer the engine
    /// knows of is back). An idle log commits a lone entry at once, and a small closed
    /// loop of writers never waits on the timer. Zero: commit back to back. Not used
    /// while `batch_max_age` lingers, nor when batches are forwarded.
    pub min_commit_interval: Duration,
    /// Minimum time between two published checkpoints.
    pub checkpoint_interval: Duration,
    /// Readers are served the latest checkpoint from memory; with a shared store (where
    /// other frontends publish too) it is re-read from storage at most this often.
    /// Checkpoints this frontend publishes are served at once.
    pub checkpoint_max_age: Duration,
    /// Publish a fresh checkpoint when the tree has not grown for this long, so that
    /// witnesses keep cosigning and monitors see the log alive. Zero: never.
    pub republish_interval: Duration,
    /// Collects cosignatures (witnesses) on each checkpoint before it is published.
    pub cosigner: Option<Arc<dyn CheckpointCosigner>>,
    /// Bound on entries queued or committing; beyond it adds get pushback.
    pub max_pending_entries: usize,
    /// Bound on entry bytes queued or committing; beyond it adds get pushback.
    pub max_pending_bytes: usize,
    /// Pushback when the dedup index lags the tree by more than this many entries.
    pub dedup_max_lag: u64,
    /// The `Retry-After` hint given with pushback.
    pub retry_after: Duration,
    /// How long a batch whose commit did not persist (storage down, connection lost)
    /// is retried before its adds fail. Zero: fail at once.
    pub commit_retry: Duration,
    /// Where the integrator, publisher and indexer run. `None`: the runtime that opens
    /// the log. A runtime of their own keeps them off the run queue that thousands of
    /// connection tasks share under overload, where each of their wake-ups would wait
    /// behind the requests they are meant to serve.
    pub background: Option<tokio::runtime::Handle>,
    /// Forward batches to the sequencing frontend instead of committing them here
    /// ([`forward`]); commit here while it cannot be reached. `None`: commit here.
    pub forward: Option<Arc<dyn Forwarder>>,
    /// Add a signature line of no known key (random key ID and bytes) to every
    /// published checkpoint, so that clients keep ignoring lines they do not know
    /// (signed-note "Signatures": verifiers MUST ignore unknown keys), as Sunlight and
    /// Azul do. Added after witnesses cosigned; never sent to them.
    pub grease: bool,
}

impl LogConfig {
    /// Defaults suited to a POSIX log on one machine.
    pub fn new(origin: impl Into<String>, signer: Arc<NoteSigner>) -> Self {
        Self::with_signer(origin, signer)
    }

    /// Defaults suited to a POSIX log on one machine, signed by `signer` of any
    /// signature type (a CT log's RFC 6962 signer).
    pub fn with_signer(origin: impl Into<String>, signer: Arc<dyn LogSigner>) -> Self {
        LogConfig {
            origin: origin.into(),
            name: String::new(),
            signers: vec![signer],
            personality: Arc::new(TlogTiles),
            batch_max_entries: 4096,
            batch_max_age: Duration::ZERO,
            min_commit_interval: Duration::ZERO,
            checkpoint_interval: Duration::from_secs(1),
            checkpoint_max_age: Duration::from_secs(1),
            // Tessera's default.
            republish_interval: Duration::from_secs(600),
            cosigner: None,
            max_pending_entries: 65_536,
            max_pending_bytes: 256 << 20,
            dedup_max_lag: 200_000,
            retry_after: Duration::from_secs(1),
            commit_retry: Duration::from_secs(10),
            background: None,
            forward: None,
            grease: false,
        }
    }
}

/// Why an add was refused or failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddError {
    /// tlog-tiles "Log entries": entries are 1..=65535 bytes.
    #[error("empty entry")]
    Empty,
    /// Larger than an entry bundle can hold.
    #[error("entry of {size} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The entry's size.
        size: usize,
        /// The personality's limit ([`Personality::max_entry_size`]).
        max: usize,
    },
    /// Not an entry of this log ([`Personality::accept`] says why): HTTP 400.
    #[error("{0}")]
    Rejected(String),
    /// The sequencing queue is full.
    #[error("sequencing queue is full")]
    QueueFull,
    /// The dedup index is too far behind the tree.
    #[error("dedup index is catching up")]
    DedupLag,
    /// The log is shutting down.
    #[error("log is shutting down")]
    ShuttingDown,
    /// The log is frozen ([`Log::freeze`]): it accepts no more entries, ever. Reads and
    /// checkpoints go on. HTTP 403.
    #[error("this log is frozen: it accepts no more entries")]
    Frozen,
    /// The batch could not be committed; the entry was not logged.
    #[error("storage: {0}")]
    Storage(String),
    /// Storage refuses writes (full, read-only, permission denied): the entry was not
    /// logged; retry later (HTTP 503).
    #[error("storage refuses writes (full, read-only or not permitted); retry later")]
    WritesRefused,
    /// Storage failed during the commit and could not be read back in time to learn
    /// whether the batch persisted: the entry may be logged. Resubmitting it is safe
    /// with dedup on (the same index comes back once the outcome is known).
    #[error("storage did not confirm the commit; the entry may be logged: resubmit it")]
    Uncertain,
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl LogConfig {
    /// The verifier of the first signer: the key the log is known by.
    ///
    /// # Panics
    /// When `signers` is empty, a configuration [`Log::open`] refuses.
    pub fn verifier(&self) -> NoteVerifier {
        self.signers[0].verifier()
    }

    /// The verifiers of every signer, in order.
    pub fn verifiers(&self) -> Vec<NoteVerifier> {
        self.signers.iter().map(|s| s.verifier()).collect()
    }
}

impl From<EntryError> for AddError {
    fn from(e: EntryError) -> Self {
        match e {
            EntryError::Empty => AddError::Empty,
            EntryError::TooLarge { size, max } => AddError::TooLarge { size, max },
            EntryError::Invalid(why) => AddError::Rejected(why),
            // A submission is never a stored bundle; a personality that says so is wrong.
            EntryError::Malformed(why) => AddError::Internal(why),
        }
    }
}

impl AddError {
    /// Whether the client should back off and retry (HTTP 503 + Retry-After).
    pub fn is_pushback(&self) -> bool {
        matches!(
            self,
            AddError::QueueFull
                | AddError::DedupLag
                | AddError::ShuttingDown
                | AddError::Uncertain
                | AddError::WritesRefused
        )
    }
}

/// A committed entry read back ([`Log::read_entry`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedEntry {
    /// Its index in the log.
    pub index: u64,
    /// Its bytes as the personality stored them.
    pub bytes: Vec<u8>,
    /// The timestamp it was sequenced at (ms since the Unix epoch; 0 when the
    /// personality's entries carry none).
    pub timestamp: u64,
}

/// A successful add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddOutcome {
    /// The entry's index in the log.
    pub index: u64,
    /// The bytes were already logged (or in flight) at `index`; nothing was appended.
    pub duplicate: bool,
    /// The timestamp the entry was sequenced with (ms since the Unix epoch), when this
    /// add learned it: always for an entry this add appended and for a duplicate of
    /// one in flight; for a duplicate of an entry logged before, when the dedup index
    /// holds it ([`Indexed::timestamp`], kept for personalities that store
    /// timestamps). `None` otherwise (rare: a resubmission answered while an uncertain
    /// commit was settled); the log has it ([`Log::read_entry`]). CT's SCT carries it.
    pub timestamp: Option<u64>,
}

impl AddOutcome {
    /// A duplicate of the entry logged at `index`, timestamp unknown here.
    pub fn duplicate(index: u64) -> Self {
        AddOutcome {
            index,
            duplicate: true,
            timestamp: None,
        }
    }

    /// A duplicate of the entry the dedup index holds as `first`.
    pub fn duplicate_of(first: Indexed) -> Self {
        AddOutcome {
            index: first.index,
            duplicate: true,
            timestamp: (first.timestamp != 0).then_some(first.timestamp),
        }
    }
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Storage failed or holds a corrupt log.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The dedup index failed.
    #[error(transparent)]
    Dedup(#[from] DedupError),
    /// The dedup index covers entries the log does not have.
    #[error(
        "the dedup index covers {indexed} entries but the log has {size}; delete the index directory to rebuild it"
    )]
    DedupAhead {
        /// The index's marker.
        indexed: u64,
        /// The committed tree size.
        size: u64,
    },
    /// The published checkpoint does not verify with the configured origin and key.
    #[error(
        "the log's published checkpoint does not verify with the configured origin and key: {0}"
    )]
    Checkpoint(String),
    /// [`LogConfig::signers`] is empty: the log could publish no checkpoint.
    #[error("no checkpoint signer is configured")]
    NoSigner,
}

/// A running log. Cheap to clone.
pub struct Log<S: LogStorage> {
    inner: Arc<Inner<S>>,
}

impl<S: LogStorage> Clone for Log<S> {
    fn clone(&self) -> Self {
        Log {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<S> {
    storage: Arc<S>,
    config: LogConfig,
    limits: QueueLimits,
    queue: Mutex<Queue>,
    work: Notify,
    /// While the integrator holds a batch for more writers ([`Pace`]): the batch size
    /// at which an add wakes it. 0: every add does.
    wake_at: AtomicUsize,
    dedup: Option<Arc<dyn DedupIndex>>,
    /// Size of the committed tree.
    committed_size: AtomicU64,
    /// The size below which this process knows every entry's index without the
    /// persistent index: the tree it opened (the index's catch-up covers it), then its
    /// own commits and the ranges its check against other writers' entries read. The
    /// committed size can run ahead of it (a late commit learned, a reload that found
    /// another writer's entries): the next commit first reads `[checked_size, prev)`.
    checked_size: AtomicU64,
    /// Persistent dedup index marker.
    indexed_size: AtomicU64,
    /// The committed size at open when the dedup index was behind it (entries a
    /// previous process committed, a migration copied, or a power cut took from an
    /// index written without sync): until the index reaches it, a lookup that misses
    /// proves nothing, and such an add is pushed back (`503`) rather than logged, maybe
    /// a second time. Entries committed since open are in the queue's in-flight map
    /// until indexed, so no later lag leaves such a gap.
    catch_up_to: u64,
    /// Counters of the add path, registered once (a `metrics::counter!` per add hashes
    /// its key and looks it up in the recorder's registry).
    dedup_lookups: metrics::Counter,
    dedup_hits: metrics::Counter,
    /// 1 + the size named by the latest published checkpoint; 0 when none is.
    published: AtomicU64,
    /// The latest checkpoint, served to readers from memory.
    latest: latest::LatestCheckpoint,
    /// The largest entry timestamp this process has seen (ms since the Unix epoch):
    /// checkpoints are signed no earlier.
    newest_timestamp: AtomicU64,
    ready: AtomicBool,
    /// The stored tree is frozen ([`Log::freeze`]).
    frozen: AtomicBool,
    /// Set, with the task's name, when a background task died: the log stops.
    failed: watch::Sender<Option<String>>,
    /// Forwarded batches awaiting their answer ([`forward::MAX_FORWARDS_IN_FLIGHT`]).
    forwards: Arc<tokio::sync::Semaphore>,
    /// Until when batches are committed here because a forward failed.
    forward_paused_until: Mutex<Option<Instant>>,
    /// Forwards in a row that went unanswered.
    forward_unknowns: std::sync::atomic::AtomicU32,
    /// The integrator holds outcomes that may still land ([`InFlight::Uncertain`]):
    /// an idle integrator reads the tree now and then to learn them.
    open_outcomes: AtomicBool,
    /// Bumped each time the integrator has read the tree to learn open outcomes:
    /// resubmissions of their entries wait on it.
    learned: watch::Sender<u64>,
    /// Aborts the background tasks ([`LogTasks::abort`]).
    aborts: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// The background tasks of a [`Log`]; await [`LogTasks::join`] after [`Log::shutdown`].
pub struct LogTasks {
    handles: Vec<JoinHandle<()>>,
    log: Box<dyn Abortable>,
}

/// What [`LogTasks::abort`] needs of its log, whatever its storage type.
trait Abortable: Send + Sync {
    fn abort(&self);
}

impl<S: LogStorage> Abortable for Log<S> {
    fn abort(&self) {
        Log::abort(self)
    }
}

impl LogTasks {
    /// Wait until the integrator has drained the queue, the final checkpoint is
    /// published and the dedup index has caught up.
    pub async fn join(self) {
        for h in self.handles {
            let _ = h.await;
        }
    }

    /// Stop the log as a crash would: its background tasks are cancelled at their
    /// next await point, whatever they were doing (a commit half done included), and
    /// every add waiting is answered [`AddError::Uncertain`] (what a client whose
    /// connection died knows). Storage is the only truth afterwards: open the log
    /// again to go on. For tests and the simulator.
    pub async fn abort(self) {
        self.log.abort();
        for h in self.handles {
            let _ = h.await;
        }
    }
}

fn lock(q: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // A panic while holding the lock cannot leave the queue half-updated in a way that
    // matters more than stopping the log would; keep serving.
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: LogStorage> Log<S> {
    /// Open the log in `storage` (creating it when new), check its right edge against
    /// the committed root, and start the integrator, publisher and dedup follower.
    pub async fn open(
        storage: Arc<S>,
        dedup: Option<Arc<dyn DedupIndex>>,
        config: LogConfig,
    ) -> Result<(Log<S>, LogTasks), EngineError> {
        if config.signers.is_empty() {
            return Err(EngineError::NoSigner);
        }
        // The checkpoint first, then the state: with several frontends on one store,
        // another may commit and publish in between, and a checkpoint is never ahead
        // of the state read after it.
        let latest = latest::LatestCheckpoint::new(config.checkpoint_max_age);
        let published = match storage.read_checkpoint().await? {
            Some(bytes) => {
                latest.offer(&bytes);
                let verifiers = config.verifiers();
                let verifiers: Vec<&NoteVerifier> = verifiers.iter().collect();
                match Checkpoint::open_with(&bytes, &config.origin, &verifiers) {
                    Ok((cp, _)) => cp.size + 1,
                    // A checkpoint this key cannot open means the wrong key or origin is
                    // configured for this log: never overwrite it.
                    Err(e) => return Err(EngineError::Checkpoint(e.to_string())),
                }
            }
            None => 0,
        };
        let edge = Edge::load(&*storage, &*config.personality, None).await?;
        let state = edge.state();
        let indexed = match &dedup {
            Some(d) => d.indexed_up_to()?,
            None => 0,
        };
        if indexed > state.size {
            // The log was restored from an older copy: the index would hand out indices
            // that do not hold the submitted bytes.
            return Err(EngineError::DedupAhead {
                indexed,
                size: state.size,
            });
        }
        if published > state.size + 1 {
            return Err(EngineError::Storage(StorageError::Corrupt(format!(
                "published checkpoint size {} is ahead of the committed tree size {}",
                published - 1,
                state.size
            ))));
        }
        let catch_up_to = if dedup.is_some() { state.size } else { 0 };
        let (committed_tx, committed_rx) = watch::channel(state);
        let limits = QueueLimits {
            batch_max_entries: config.batch_max_entries.max(1),
            max_entries: config.max_pending_entries.max(1),
            max_bytes: config
                .max_pending_bytes
                .max(config.personality.max_entry_size()),
        };
        let mut queue = Queue::new();
        queue.frozen = state.frozen;
        let inner = Arc::new(Inner {
            storage,
            limits,
            queue: Mutex::new(queue),
            work: Notify::new(),
            wake_at: AtomicUsize::new(0),
            dedup,
            committed_size: AtomicU64::new(state.size),
            checked_size: AtomicU64::new(state.size),
            indexed_size: AtomicU64::new(indexed),
            catch_up_to,
            dedup_lookups: metrics::counter!("tlogd_dedup_lookups_total", "log" => config.name.clone()),
            dedup_hits: metrics::counter!("tlogd_dedup_hits_total", "log" => config.name.clone()),
            published: AtomicU64::new(published),
            latest,
            newest_timestamp: AtomicU64::new(edge.last_timestamp),
            ready: AtomicBool::new(true),
            frozen: AtomicBool::new(state.frozen),
            failed: watch::Sender::new(None),
            forwards: Arc::new(tokio::sync::Semaphore::new(forward::MAX_FORWARDS_IN_FLIGHT)),
            forward_paused_until: Mutex::new(None),
            forward_unknowns: Default::default(),
            open_outcomes: AtomicBool::new(false),
            learned: watch::Sender::new(0),
            aborts: Mutex::new(Vec::new()),
            config,
        });
        metrics::gauge!("tlogd_integrated_tree_size", "log" => inner.config.name.clone())
            .set(state.size as f64);
        metrics::gauge!("tlogd_log_frozen", "log" => inner.config.name.clone())
            .set(if state.frozen { 1.0 } else { 0.0 });
        let log = Log { inner };
        let mut handles = Vec::new();
        let (index_tx, index_rx) = mpsc::unbounded_channel();
        if log.inner.dedup.is_some() {
            let l = log.clone();
            handles.push(log.supervise("dedup indexer", async move {
                l.run_indexer(index_rx, indexed).await
            }));
        }
        let l = log.clone();
        handles.push(log.supervise("integrator", async move {
            l.run_integrator(edge, index_tx, committed_tx).await
        }));
        let l = log.clone();
        handles.push(log.supervise(
            "publisher",
            async move { l.run_publisher(committed_rx).await },
        ));
        Ok((
            log.clone(),
            LogTasks {
                handles,
                log: Box::new(log),
            },
        ))
    }

    /// The storage this log commits to.
    pub fn storage(&self) -> &Arc<S> {
        &self.inner.storage
    }

    /// The log's configuration.
    pub fn config(&self) -> &LogConfig {
        &self.inner.config
    }

    /// Size of the committed (durable) tree.
    pub fn committed_size(&self) -> u64 {
        self.inner.committed_size.load(Ordering::Acquire)
    }

    /// Size named by the latest checkpoint this log published, or covered by a larger
    /// one another frontend of a shared store published.
    pub fn published_size(&self) -> Option<u64> {
        self.inner.published.load(Ordering::Acquire).checked_sub(1)
    }

    /// The latest signed checkpoint, for readers, without a storage read per call:
    /// what this frontend last published, or, with a shared store, what storage held
    /// when last read (at most [`LogConfig::checkpoint_max_age`] ago, or a little more
    /// while one reader re-reads it and the others are served the copy in hand).
    pub async fn latest_checkpoint(&self) -> Result<Option<bytes::Bytes>, StorageError> {
        let storage = &self.inner.storage;
        if !storage.reads_are_committed() {
            // Only this process publishes: the copy in hand is the stored one.
            return Ok(self.inner.latest.in_hand());
        }
        self.inner.latest.get(|| storage.read_checkpoint()).await
    }

    /// How far the tree is known to reach, without I/O: the committed size, or the
    /// size of the latest checkpoint in hand when another frontend of a shared store
    /// has published a larger one. Readers learn sizes from checkpoints, so no reader
    /// can know of a path beyond it, except from a checkpoint newer than the one in
    /// hand: see [`Log::known_size_since`].
    pub fn known_size(&self) -> u64 {
        self.committed_size().max(self.inner.latest.size())
    }

    /// [`Log::known_size`] as of `arrival` (when a reader asked): with a shared store,
    /// after a checkpoint read that began at or after `arrival` (shared by every
    /// reader waiting, at most ten a second however many ask), so a checkpoint another
    /// frontend had published by then counts; on a store only this process writes,
    /// `known_size`, at once.
    pub async fn known_size_since(&self, arrival: Instant) -> u64 {
        let storage = &self.inner.storage;
        if storage.reads_are_committed() {
            self.inner
                .latest
                .read_since(arrival, || storage.read_checkpoint())
                .await;
        }
        self.known_size()
    }

    /// Entries committed but not yet in the persistent dedup index.
    pub fn dedup_lag(&self) -> u64 {
        if self.inner.dedup.is_none() {
            return 0;
        }
        self.committed_size()
            .saturating_sub(self.inner.indexed_size.load(Ordering::Acquire))
    }

    /// Whether the integrator can currently commit (false after a storage failure
    /// until a reload succeeds).
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire)
    }

    /// Entries queued or committing.
    pub fn queue_depth(&self) -> usize {
        lock(&self.inner.queue).entries
    }

    /// Sequence `entry`. Resolves once the entry and a tree state containing it are
    /// durable (or, for a duplicate, to the index where the same bytes already are).
    pub async fn add(&self, entry: Bytes) -> Result<AddOutcome, AddError> {
        let mut deadline = None;
        loop {
            match self.push_entry(entry.clone(), false)? {
                Ok(Pushed::Uncertain) => {
                    // A resubmission of an entry whose commit may still land: wait a
                    // little for the integrator to learn the outcome (asking it to read
                    // the tree once), never queue it for a second index (503 if it
                    // stays open).
                    let ask = deadline.is_none();
                    let until = *deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now()
                            + self.inner.config.commit_retry.min(UNCERTAIN_WAIT)
                    });
                    if !self.wait_learned(until, ask).await {
                        return Err(AddError::Uncertain);
                    }
                }
                Ok(pushed) => return self.await_pushed(pushed).await,
                Err(known) => return Ok(known),
            }
        }
    }

    /// Wait until the integrator has learned an open outcome (true) or `until` passes
    /// (false); with `ask`, ask it to read the tree first.
    async fn wait_learned(&self, until: tokio::time::Instant, ask: bool) -> bool {
        let mut rx = self.inner.learned.subscribe();
        rx.mark_unchanged();
        if ask {
            self.inner.work.notify_one();
        }
        matches!(
            tokio::time::timeout_at(until, rx.changed()).await,
            Ok(Ok(()))
        )
    }

    /// What the dedup index says of an entry whose [`Personality::dedup_key`] is `key`,
    /// without the entry: `Some` (a duplicate, its index and timestamp) when the index
    /// holds it within the committed tree, as [`Log::add`] would answer it; `None` when
    /// it does not or there is no index (then only [`Log::add`] can tell). A
    /// personality whose entries cost much to build (a CT chain's validation) asks this
    /// first.
    pub fn committed_duplicate(&self, key: &[u8; 32]) -> Option<AddOutcome> {
        let inner = &self.inner;
        let dedup = inner.dedup.as_ref()?;
        match dedup.get(key) {
            // Counted as a lookup and a hit only when it answers: a miss goes on to
            // `Log::add`, which looks up and counts once.
            Ok(Some(first)) if first.index < self.committed_size() => {
                inner.dedup_lookups.increment(1);
                inner.dedup_hits.increment(1);
                Some(AddOutcome::duplicate_of(first))
            }
            _ => None,
        }
    }

    /// Sequence entries another frontend forwarded here ([`forward`]): each is
    /// answered exactly as [`Log::add`] would answer it, in order, and none is
    /// forwarded on. All are queued before any is waited for, so they commit together.
    pub async fn add_forwarded(&self, entries: Vec<Bytes>) -> Vec<ForwardedOutcome> {
        let pushed: Vec<_> = entries
            .into_iter()
            .map(|e| self.push_entry(e, true))
            .collect();
        let mut outcomes = Vec::with_capacity(pushed.len());
        for p in pushed {
            outcomes.push(match p {
                // Maybe logged here by a commit still open: the forwarding frontend
                // answers its client 503 and keeps the entry tied to this one.
                Ok(Ok(Pushed::Uncertain)) => Err(AddError::Uncertain),
                Ok(Ok(pushed)) => self.await_pushed(pushed).await,
                Ok(Err(known)) => Ok(known),
                Err(e) => Err(e),
            });
        }
        outcomes
    }

    /// Validate `entry` and queue it: `Ok(Ok(_))` to wait on, `Ok(Err(_))` when the
    /// dedup index already answers it. `pinned`: forwarded here, never forwarded on.
    fn push_entry(
        &self,
        entry: Bytes,
        pinned: bool,
    ) -> Result<Result<Pushed, AddOutcome>, AddError> {
        let inner = &self.inner;
        let personality = &*inner.config.personality;
        let leaf = personality.accept(&entry).map_err(AddError::from)?;
        let Some(dedup) = &inner.dedup else {
            return lock(&inner.queue)
                .push(&inner.limits, entry, leaf, None, pinned)
                .map(Ok);
        };
        if self.dedup_lag() > inner.config.dedup_max_lag {
            return Err(AddError::DedupLag);
        }
        let h = personality.dedup_key(&entry);
        inner.dedup_lookups.increment(1);
        loop {
            // The indexer writes the index, then advances this marker, then forgets the
            // entry's in-flight record. If the marker moved between our lookup and the
            // queue lock, the entry may have left the in-flight map after our lookup
            // missed it: look again rather than log it twice.
            let marker = inner.indexed_size.load(Ordering::Acquire);
            match dedup.get(&h) {
                // Never answer with an index the committed tree does not contain.
                Ok(Some(first)) if first.index < self.committed_size() => {
                    inner.dedup_hits.increment(1);
                    return Ok(Err(AddOutcome::duplicate_of(first)));
                }
                Ok(_) => {}
                // Best effort: an unreadable index never blocks logging, except
                // during the catch-up below, when nothing else can tell.
                Err(e) => tracing::warn!(error = %e, "dedup lookup failed"),
            }
            // Entries committed before open and not yet indexed: a miss proves nothing
            // (entries other frontends commit later are a known limit, docs/reliability.md).
            if marker < inner.catch_up_to {
                return Err(AddError::DedupLag);
            }
            let pushed = {
                let mut q = lock(&inner.queue);
                if inner.indexed_size.load(Ordering::Acquire) != marker && !q.is_in_flight(&h) {
                    continue;
                }
                q.push(&inner.limits, entry.clone(), leaf, Some(h), pinned)?
            };
            return Ok(Ok(pushed));
        }
    }

    async fn await_pushed(&self, pushed: Pushed) -> Result<AddOutcome, AddError> {
        let inner = &self.inner;
        match pushed {
            Pushed::Queued(slot, pos) => {
                // A wake-up per add, while the integrator holds a batch, cost more
                // than the commits the hold saves.
                if pos as usize + 1 >= inner.wake_at.load(Ordering::Relaxed) {
                    inner.work.notify_one();
                }
                let placed = slot.wait().await?.index_of(pos)?;
                if placed.duplicate {
                    inner.dedup_hits.increment(1);
                }
                Ok(placed)
            }
            Pushed::DuplicatePending(slot, pos) => {
                inner.dedup_hits.increment(1);
                // The same batch as the entry it repeats: the same timestamp.
                let placed = slot.wait().await?.index_of(pos)?;
                Ok(AddOutcome {
                    duplicate: true,
                    ..placed
                })
            }
            Pushed::DuplicateCommitted(first) => {
                inner.dedup_hits.increment(1);
                Ok(AddOutcome::duplicate_of(first))
            }
            Pushed::Uncertain => Err(AddError::Uncertain),
        }
    }

    /// Run a background task; if it panics, the log fails stop ([`Log::failed`]).
    fn supervise(
        &self,
        name: &'static str,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        // Every line the task logs names its log (a daemon may serve several).
        let task = tracing::Instrument::instrument(
            task,
            tracing::info_span!("log", name = %self.inner.config.name),
        );
        let task = match &self.inner.config.background {
            Some(runtime) => runtime.spawn(task),
            None => tokio::spawn(task),
        };
        self.inner
            .aborts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task.abort_handle());
        let log = self.clone();
        tokio::spawn(async move {
            if let Err(e) = task.await
                && e.is_panic()
            {
                log.fail_stop(name);
            }
        })
    }

    /// A background task died: refuse new adds, answer every queued one with an error
    /// (an add must never wait forever), and report not ready. The daemon exits on
    /// [`Log::failed`]; a restart re-reads storage, the only source of truth.
    fn fail_stop(&self, task: &str) {
        tracing::error!(task, "a background task of the log panicked; the log stops");
        metrics::counter!("tlogd_task_failures_total", "log" => self.inner.config.name.clone(), "task" => task.to_string()).increment(1);
        self.inner.ready.store(false, Ordering::Release);
        self.inner
            .failed
            .send_replace(Some(format!("the log's {task} task panicked")));
        self.close_and_drain();
        self.inner.work.notify_one();
    }

    /// Refuse new adds and drop the queued batches, which answers their adds
    /// "uncertain" (`PendingBatch`'s `Drop`); freezes waiting are answered "stopped"
    /// when their senders drop.
    fn close_and_drain(&self) {
        let queued = {
            let mut q = lock(&self.inner.queue);
            q.closed = true;
            q.entries = 0;
            q.bytes = 0;
            q.freezes.clear();
            std::mem::take(&mut q.batches)
        };
        drop(queued);
    }

    /// See [`LogTasks::abort`].
    fn abort(&self) {
        for task in self
            .inner
            .aborts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
        self.inner.ready.store(false, Ordering::Release);
        self.close_and_drain();
    }

    /// Resolves, with the reason, once a background task of the log has died (a bug):
    /// the log accepts nothing more and the process should exit.
    pub async fn failed(&self) -> String {
        let mut rx = self.inner.failed.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // The sender lives in `inner`, which `self` keeps alive.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The committed entry at `index` as the personality stored it, with the timestamp
    /// it was sequenced at (0 for a personality whose entries carry none); `None`
    /// beyond the committed tree. What a duplicate is answered with beyond its index
    /// comes from here: the dedup index maps an entry to its index only, and the
    /// stored entry holds the rest (CT's SCT needs the original timestamp;
    /// docs/seams.md, "Dedup value"). One bundle read (a partial one, or the full
    /// bundle that replaced it).
    pub async fn read_entry(&self, index: u64) -> Result<Option<LoggedEntry>, StorageError> {
        let size = self.committed_size();
        if index >= size {
            return Ok(None);
        }
        let personality = &*self.inner.config.personality;
        let n = index / TILE_WIDTH;
        let width = (size - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let id = TileId {
            kind: personality.bundle_kind(),
            index: n,
            width,
        };
        let bytes = read_bundle(&*self.inner.storage, &id).await?;
        let entries = personality
            .split_bundle(&bytes)
            .map_err(|e| StorageError::Corrupt(format!("{}: {e}", id.path())))?;
        let at = (index % TILE_WIDTH) as usize;
        let entry = entries
            .get(at)
            .ok_or_else(|| StorageError::Corrupt(format!("{} has no entry {at}", id.path())))?;
        Ok(Some(LoggedEntry {
            index,
            bytes: entry.bytes.to_vec(),
            timestamp: entry.timestamp,
        }))
    }

    /// Whether an add of an entry of `len` bytes would be queued now, as far as the log's
    /// own state tells: `Err` with what [`Log::add`] would answer (shutting down,
    /// frozen, queue full, dedup index behind). A personality that writes something an
    /// entry needs before queueing it (a CT log stores its chain's issuers) asks this
    /// first, so that an add refused for the log's state writes nothing (#62). Not a
    /// reservation: [`Log::add`] may still refuse what was admitted a moment before.
    pub fn admits(&self, len: usize) -> Result<(), AddError> {
        let inner = &self.inner;
        if self.is_frozen() {
            return Err(AddError::Frozen);
        }
        if let Some(refused) = lock(&inner.queue).refusal(&inner.limits, len) {
            return Err(refused);
        }
        if inner.dedup.is_some() && self.dedup_lag() > inner.config.dedup_max_lag {
            return Err(AddError::DedupLag);
        }
        Ok(())
    }

    /// Whether the log is frozen: as stored when it was opened, frozen by
    /// [`Log::freeze`], or found frozen by another frontend of a shared store at a
    /// commit.
    pub fn is_frozen(&self) -> bool {
        self.inner.frozen.load(Ordering::Acquire)
    }

    /// Freeze the log for good: from now on adds are refused ([`AddError::Frozen`],
    /// HTTP 403), entries already queued are committed first, then the stored tree is
    /// frozen by one compare-and-swap, which every frontend of a shared store obeys and
    /// every later open reads. Reads, checkpoints and republishing go on; the final
    /// checkpoint names the frozen size. Resolves to the frozen state once it is
    /// durable (at once if it already is). Err when storage would not take it within
    /// the commit-retry time: the log then refuses adds until a restart, which reads
    /// the stored state again.
    pub async fn freeze(&self) -> Result<TreeState, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut q = lock(&self.inner.queue);
            if q.closed {
                return Err("the log is shutting down".into());
            }
            q.frozen = true;
            q.freezes.push(tx);
        }
        self.inner.work.notify_one();
        rx.await
            .unwrap_or_else(|_| Err("the log stopped before it was frozen".into()))
    }

    /// Stop accepting adds. Queued entries are still committed, then a final checkpoint
    /// is published; await [`LogTasks::join`] for that to finish.
    pub fn shutdown(&self) {
        lock(&self.inner.queue).closed = true;
        self.inner.work.notify_one();
    }

    fn is_closed(&self) -> bool {
        lock(&self.inner.queue).closed
    }

    /// Where to forward batches, unless forwarding is off or paused after a failure.
    fn forward_target(&self) -> Option<Arc<dyn Forwarder>> {
        let forwarder = self.inner.config.forward.as_ref()?;
        let mut paused = self
            .inner
            .forward_paused_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match *paused {
            Some(until) if Instant::now() < until => None,
            Some(_) => {
                *paused = None;
                tracing::info!(to = forwarder.target(), "forwarding batches again");
                Some(forwarder.clone())
            }
            None => Some(forwarder.clone()),
        }
    }

    /// Forward one batch and answer its adds with what the sequencing frontend says
    /// (see [`forward`] for the protocol).
    async fn forward_batch(&self, batch: PendingBatch, forwarder: Arc<dyn Forwarder>) {
        let inner = &self.inner;
        let n = batch.entries.len();
        let counter = |outcome: &'static str| metrics::counter!("tlogd_forwarded_batches_total", "log" => inner.config.name.clone(), "outcome" => outcome);
        let result = match forwarder.forward(batch.entries.clone()).await {
            Ok(outcomes) if outcomes.len() == n => {
                counter("answered").increment(1);
                inner.forward_unknowns.store(0, Ordering::Relaxed);
                metrics::counter!("tlogd_forwarded_entries_total", "log" => inner.config.name.clone())
                    .increment(n as u64);
                let mut each: Vec<Placement> =
                    vec![Err(AddError::Uncertain); n + batch.dropped.len()];
                for &(pos, index) in &batch.dropped {
                    each[pos as usize] = Ok(AddOutcome::duplicate(index));
                }
                for (i, o) in outcomes.into_iter().enumerate() {
                    each[batch.pushed_position(i) as usize] = o;
                }
                Ok(Placed {
                    first: 0,
                    dropped: None,
                    each: Some(each.into()),
                    timestamp: None,
                })
            }
            Ok(outcomes) => {
                counter("unknown").increment(1);
                let why = format!("{} outcomes for {n} entries", outcomes.len());
                self.forward_unanswered(&*forwarder, &why);
                Err(AddError::Uncertain)
            }
            Err(ForwardError::Unsent(why)) if batch.forward_only.is_empty() => {
                // Nothing was queued at the other frontend, for certain: commit the
                // batch here, first.
                counter("unsent").increment(1);
                self.pause_forwarding(&*forwarder, &why);
                let mut batch = batch;
                let committed = self.committed_size();
                let mut q = lock(&inner.queue);
                // While it was away, a commit's check against other writers' entries
                // may have found some of its entries logged (the late commit of a
                // crashed process of ours): it dropped them from the queued batches,
                // but this batch was not there. Marked committed in flight, or
                // already in the index (the indexer forgets in-flight records once
                // it holds them: looked up after them), they are dropped now and
                // answered with their indices, never appended again (#57, simulator
                // seed 666800).
                let dedup = inner.dedup.clone();
                let (dropped, bytes) = batch.drop_logged(|h| match q.inflight.get(h) {
                    Some(InFlight::Committed(first)) => Some(first.index),
                    _ => dedup
                        .as_ref()
                        .and_then(|d| d.get(h).ok().flatten())
                        .filter(|first| first.index < committed)
                        .map(|first| first.index),
                });
                q.entries -= dropped;
                q.bytes -= bytes;
                q.batches.push_front(batch);
                drop(q);
                inner.work.notify_one();
                return;
            }
            Err(ForwardError::Unsent(why)) => {
                // It holds resubmissions of entries an earlier forward may have logged
                // there: never committed here. Answered "may be logged" (resubmit);
                // the others were logged nowhere.
                counter("unsent").increment(1);
                self.pause_forwarding(&*forwarder, &why);
                self.answer_forward_only(batch);
                return;
            }
            Err(ForwardError::Unknown(why)) => {
                // The other frontend may have logged it: committing it here could log
                // it twice. The adds are answered "uncertain" (resubmit).
                counter("unknown").increment(1);
                self.forward_unanswered(&*forwarder, &why);
                Err(AddError::Uncertain)
            }
        };
        {
            let mut q = lock(&inner.queue);
            q.entries -= n;
            q.bytes -= batch.bytes;
            match &result {
                // Answered: resubmissions find the entries in the other frontend's
                // index, not here; an entry it answered "may be logged" stays tied to
                // it.
                Ok(placed) => {
                    for (i, h) in batch.hashes.iter().enumerate() {
                        if !matches!(q.inflight.get(h), Some(InFlight::Pending(slot, _)) if Arc::ptr_eq(slot, &batch.slot))
                        {
                            continue;
                        }
                        match placed.index_of(batch.pushed_position(i)) {
                            Err(AddError::Uncertain) => {
                                q.inflight
                                    .insert(*h, InFlight::Uncertain { forwarded: true });
                            }
                            _ => {
                                q.inflight.remove(h);
                            }
                        }
                    }
                }
                // Unanswered: the other frontend may hold every entry.
                Err(_) => q.release(&batch, Some(Uncertainty::Forwarded)),
            }
        }
        batch.slot.complete(result);
    }

    /// A batch holding resubmissions of entries an unanswered forward may have logged
    /// there, which cannot be forwarded now: answered "may be logged" (resubmit); those
    /// entries stay tied to the sequencing frontend, the others leave the in-flight map.
    fn answer_forward_only(&self, batch: PendingBatch) {
        {
            let mut q = lock(&self.inner.queue);
            q.entries -= batch.entries.len();
            q.bytes -= batch.bytes;
            q.release(&batch, None);
        }
        batch.slot.complete(Err(AddError::Uncertain));
    }

    /// A forward went unanswered: the second in a row pauses forwarding.
    fn forward_unanswered(&self, forwarder: &dyn Forwarder, why: &str) {
        if self.inner.forward_unknowns.fetch_add(1, Ordering::Relaxed) >= 1 {
            self.inner.forward_unknowns.store(0, Ordering::Relaxed);
            self.pause_forwarding(forwarder, why);
        } else {
            tracing::warn!(
                to = forwarder.target(),
                error = why,
                "a forward went unanswered"
            );
        }
    }

    fn pause_forwarding(&self, forwarder: &dyn Forwarder, why: &str) {
        let mut paused = self
            .inner
            .forward_paused_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if paused.is_none() {
            tracing::warn!(
                to = forwarder.target(),
                error = why,
                pause_s = forward::FORWARD_PAUSE.as_secs(),
                "forwarding failed: committing batches here"
            );
        }
        *paused = Some(Instant::now() + forward::FORWARD_PAUSE);
    }

    async fn next_work(&self, pace: &mut Pace) -> Option<Work> {
        enum Next {
            Take,
            Linger,
            Hold(Instant, usize),
            Freeze,
            Wait,
            Watch,
            Done,
        }
        let inner = &self.inner;
        let interval = if inner.config.forward.is_some() {
            Duration::ZERO
        } else {
            inner.config.min_commit_interval
        };
        loop {
            let next = {
                let q = lock(&inner.queue);
                pace.note_waiting(|| q.batches.iter().map(|b| b.entries.len()).sum());
                match q.batches.front() {
                    // Entries accepted before a freeze was asked for are committed first.
                    None if !q.freezes.is_empty() => Next::Freeze,
                    None if q.closed => Next::Done,
                    None if inner.open_outcomes.load(Ordering::Acquire) => Next::Watch,
                    None => Next::Wait,
                    Some(b) => {
                        let full = b.entries.len() >= inner.limits.batch_max_entries;
                        if full || q.closed {
                            Next::Take
                        } else if !inner.config.batch_max_age.is_zero() {
                            Next::Linger
                        } else {
                            match pace.hold(b.entries.len(), interval, Instant::now()) {
                                Some((until, target)) => Next::Hold(until, target),
                                None => Next::Take,
                            }
                        }
                    }
                }
            };
            match next {
                Next::Take => {
                    let batch = lock(&inner.queue).batches.pop_front();
                    return batch.map(|b| Work::Batch(pace.started(b)));
                }
                Next::Done => return None,
                Next::Freeze => {
                    return Some(Work::Freeze(std::mem::take(
                        &mut lock(&inner.queue).freezes,
                    )));
                }
                Next::Linger => {
                    tokio::time::sleep(inner.config.batch_max_age).await;
                    if let Some(b) = lock(&inner.queue).batches.pop_front() {
                        return Some(Work::Batch(pace.started(b)));
                    }
                }
                // Published before looking again, under the queue's lock: an add that
                // reaches the target after this look sees it, and wakes us.
                Next::Hold(until, target) => {
                    inner.wake_at.store(target, Ordering::Relaxed);
                    let short = matches!(lock(&inner.queue).batches.front(), Some(b) if b.entries.len() < target);
                    if short {
                        let until = tokio::time::Instant::from_std(until);
                        let _ = tokio::time::timeout_at(until, inner.work.notified()).await;
                    }
                    inner.wake_at.store(0, Ordering::Relaxed);
                }
                Next::Wait => inner.work.notified().await,
                // Idle with outcomes that may still land: read the tree when a
                // resubmission asks, and now and then, to learn them.
                Next::Watch => {
                    let _ = tokio::time::timeout(SETTLE_EVERY, inner.work.notified()).await;
                    let q = lock(&inner.queue);
                    if q.batches.is_empty() && q.freezes.is_empty() && !q.closed {
                        return Some(Work::Settle);
                    }
                }
            }
        }
    }

    async fn run_integrator(
        self,
        edge: Edge,
        index_tx: mpsc::UnboundedSender<ToIndex>,
        committed_tx: watch::Sender<TreeState>,
    ) {
        let inner = &self.inner;
        let mut edge = Some(edge);
        // Since when the sequencing lock is held, if it is.
        let mut sequencer: Option<Instant> = None;
        // Batches whose commit outcome is not known (their adds were answered
        // `Uncertain`): each is remembered, its entries kept in flight, until a read of
        // the tree proves it landed or can never land; every commit first checks the
        // tree it builds on against them, so none can ever be appended twice.
        let mut open: Vec<Unresolved> = Vec::new();
        let mut pace = Pace::default();
        loop {
            while let Some(work) = self.next_work(&mut pace).await {
                let mut batch = match work {
                    Work::Batch(batch) => batch,
                    Work::Settle => {
                        let _ = self
                            .settle(&mut open, &mut edge, &index_tx, &committed_tx, None)
                            .await;
                        continue;
                    }
                    Work::Freeze(callers) => {
                        let frozen = match self
                            .settle(&mut open, &mut edge, &index_tx, &committed_tx, None)
                            .await
                        {
                            Ok(()) => {
                                self.freeze_tree(&mut edge, &committed_tx, &mut sequencer)
                                    .await
                            }
                            Err(reason) => Err(reason),
                        };
                        // The freeze may have settled what was open (a swap of ours);
                        // learn it while the tree is read anyway.
                        if !open.is_empty() {
                            let _ = self
                                .settle(&mut open, &mut edge, &index_tx, &committed_tx, None)
                                .await;
                        }
                        if sequencer.take().is_some() {
                            inner.storage.release_sequencer(true).await;
                        }
                        for caller in callers {
                            let _ = caller.send(frozen.clone());
                        }
                        continue;
                    }
                };
                metrics::gauge!("tlogd_queue_depth", "log" => self.inner.config.name.clone())
                    .set(self.queue_depth() as f64);
                let settled = self
                    .settle(
                        &mut open,
                        &mut edge,
                        &index_tx,
                        &committed_tx,
                        Some(&mut batch),
                    )
                    .await;
                let n = batch.entries.len();
                let bytes = batch.bytes;
                // Another frontend sequences this log: hand the batch over (`forward`).
                let forwarder = match (&settled, n, batch.pinned) {
                    (Ok(()), 1.., false) => self.forward_target(),
                    _ => None,
                };
                // Resubmissions of entries an unanswered forward may have logged there
                // are never committed here: "may be logged" until it answers.
                if forwarder.is_none() && !batch.forward_only.is_empty() {
                    self.answer_forward_only(batch);
                    continue;
                }
                if let Some(forwarder) = forwarder
                    && let Ok(permit) = inner.forwards.clone().acquire_owned().await
                {
                    // Holding the sequencer here would keep the other frontend waiting.
                    if sequencer.take().is_some() {
                        inner.storage.release_sequencer(true).await;
                    }
                    let log = self.clone();
                    tokio::spawn(async move {
                        log.forward_batch(batch, forwarder).await;
                        drop(permit);
                    });
                    continue;
                }
                let result = match settled {
                    // Every entry was a resubmission of a batch found logged: nothing to
                    // commit.
                    Ok(()) if n == 0 => Ok(Appended {
                        first: self.committed_size(),
                        timestamp: None,
                    }),
                    Ok(()) => {
                        self.commit_batch(
                            &mut edge,
                            &mut batch,
                            &committed_tx,
                            &mut sequencer,
                            &mut open,
                            &index_tx,
                        )
                        .await
                    }
                    // Not attempted: nothing of it was logged, but an earlier outcome
                    // is open, which an entry of it may repeat (without dedup), so
                    // never "not logged" (500) now: 503, resubmit.
                    Err(reason) => {
                        tracing::warn!(error = %reason, entries = n, "batch not attempted while an earlier outcome is unknown");
                        Err(Outcome::Failed(AddError::Uncertain))
                    }
                };
                let mut maybe = None;
                let result = match result {
                    Ok(appended) => Ok(appended),
                    Err(Outcome::Failed(e)) => Err(self.failed_answer(e)),
                    Err(Outcome::Unknown { attempts }) => {
                        open.push(Unresolved {
                            attempts,
                            hashes: batch.hashes.clone(),
                        });
                        inner.open_outcomes.store(true, Ordering::Release);
                        maybe = Some(Uncertainty::Local);
                        Err(AddError::Uncertain)
                    }
                };
                let timestamp = match &result {
                    Ok(a) => self.stored_timestamp(a.timestamp),
                    Err(_) => 0,
                };
                {
                    let mut q = lock(&inner.queue);
                    q.entries -= n;
                    q.bytes -= bytes;
                    match &result {
                        Ok(a) => {
                            for (i, h) in batch.hashes.iter().enumerate() {
                                let first = Indexed {
                                    index: a.first + i as u64,
                                    timestamp,
                                };
                                q.inflight.insert(*h, InFlight::Committed(first));
                            }
                        }
                        // Forget the entries (only while they still point at this
                        // batch: a resubmission queued since may have taken their
                        // place), or keep them "maybe logged" while the outcome is open.
                        Err(_) => q.release(&batch, maybe),
                    }
                }
                if let Ok(a) = &result
                    && inner.dedup.is_some()
                    && n > 0
                {
                    let _ = index_tx.send(ToIndex {
                        first: a.first,
                        timestamp,
                        hashes: std::mem::take(&mut batch.hashes),
                    });
                }
                let dropped = (!batch.dropped.is_empty())
                    .then(|| Arc::<[(u32, u64)]>::from(std::mem::take(&mut batch.dropped)));
                batch.slot.complete(result.map(|a| Placed {
                    first: a.first,
                    dropped,
                    each: None,
                    timestamp: a.timestamp,
                }));
                // Keep the lock while busy, for at most one slice: other frontends waiting
                // for it get their turn, and an idle log holds nothing.
                let idle = lock(&inner.queue).batches.is_empty();
                if let Some(since) = sequencer
                    && (idle || since.elapsed() >= SEQUENCER_SLICE)
                {
                    inner.storage.release_sequencer(idle).await;
                    sequencer = None;
                }
            }
            // Forwards still awaiting their answer may hand their batches back.
            if let Ok(all) = inner
                .forwards
                .acquire_many(forward::MAX_FORWARDS_IN_FLIGHT as u32)
                .await
            {
                drop(all);
            }
            if lock(&inner.queue).batches.is_empty() {
                break;
            }
        }
        if sequencer.is_some() {
            inner.storage.release_sequencer(true).await;
        }
        if !open.is_empty() {
            // Shutting down: one more try, so the dedup index learns a batch that did
            // persist. A batch still unknown is learned at the next start (the index
            // catches up from the tree).
            let _ = self
                .settle(&mut open, &mut edge, &index_tx, &committed_tx, None)
                .await;
        }
        // Dropping the senders tells the publisher and the dedup follower to finish.
        drop(index_tx);
        drop(committed_tx);
        tracing::info!(size = self.committed_size(), "integrator drained");
    }

    /// Integrate and commit one batch; Ok(where it went). Takes the store's sequencing
    /// lock unless `sequencer` says it is held; leaves it held on success.
    async fn commit_batch(
        &self,
        edge: &mut Option<Edge>,
        batch: &mut PendingBatch,
        committed_tx: &watch::Sender<TreeState>,
        sequencer: &mut Option<Instant>,
        open: &mut Vec<Unresolved>,
        index_tx: &mpsc::UnboundedSender<ToIndex>,
    ) -> Result<Appended, Outcome> {
        let storage = &self.inner.storage;
        let deadline = Instant::now() + self.inner.config.commit_retry;
        let mut backoff = Duration::from_millis(20);
        let mut attempt = 0u32;
        // Attempts of this batch (prev, next) that failed and read back as not
        // persisted, but may still land: see `try_commit`.
        let mut maybe_late = Vec::new();
        loop {
            attempt += 1;
            // Held since our last commit, the lock kept every other frontend out: the
            // edge is current. Freshly taken, the stored state must be checked.
            let result = match sequencer {
                Some(_) => {
                    let known = Known {
                        open: &mut *open,
                        index_tx,
                    };
                    self.try_commit(edge, batch, committed_tx, false, &mut maybe_late, known)
                        .await
                }
                None => match storage.acquire_sequencer().await {
                    Ok(()) => {
                        *sequencer = Some(Instant::now());
                        let known = Known {
                            open: &mut *open,
                            index_tx,
                        };
                        self.try_commit(edge, batch, committed_tx, true, &mut maybe_late, known)
                            .await
                    }
                    Err(e) => Err(Retry::Transient(e.to_string())),
                },
            };
            if result.is_err() && sequencer.take().is_some() {
                storage.release_sequencer(false).await;
            }
            // An attempt that may still land makes every "not logged" answer a guess:
            // the batch is answered "uncertain" and settled before the next commits.
            let unsettled = |failed: AddError| match maybe_late.iter().any(|a| !a.settled) {
                true => Outcome::Unknown {
                    attempts: maybe_late.clone(),
                },
                false => Outcome::Failed(failed),
            };
            let reason = match result {
                Ok(first) => return Ok(first),
                Err(Retry::Conflict) if attempt < 64 => continue,
                Err(Retry::Conflict) => "tree state kept changing under us".to_string(),
                Err(Retry::Transient(reason)) => reason,
                Err(Retry::Bug(reason)) => return Err(unsettled(AddError::Internal(reason))),
                Err(Retry::Frozen) => return Err(unsettled(AddError::Frozen)),
                Err(Retry::Unknown) => {
                    return Err(Outcome::Unknown {
                        attempts: maybe_late,
                    });
                }
                // Retrying would hold the adds for the whole retry time for nothing:
                // push back now; the next batch tries again.
                Err(Retry::WritesRefused(reason)) => {
                    tracing::error!(error = %reason, "storage refuses writes; adds are pushed back");
                    return Err(unsettled(AddError::WritesRefused));
                }
            };
            // Nothing of the batch persisted, as far as reading tells. Retry while the
            // caller can still get an answer in time (a database restart, a dropped
            // connection); then fail, or, if an attempt may still land, say so.
            if Instant::now() + backoff > deadline {
                return Err(unsettled(AddError::Storage(reason)));
            }
            tracing::warn!(attempt, error = %reason, "batch not committed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// One attempt: reload the edge if it is stale (`check_stored`: compare it with
    /// the stored state first) or unknown, integrate, commit. `Err` only when the batch
    /// is known not to have persisted.
    ///
    /// `maybe_late` holds this batch's earlier attempts that failed and read back as
    /// not persisted. Reading back cannot rule out a commit still in flight: a
    /// `COMMIT` whose connection was cut may reach the database after the read (the
    /// retry's row lock then waits for it and finds the tree moved), a conditional
    /// write may land late. So before integrating the batch again on a tree that has
    /// grown, the engine checks whether the growth is one of those attempts, and if
    /// so acknowledges it: invariant 3 (no batch logged twice).
    async fn try_commit(
        &self,
        edge: &mut Option<Edge>,
        batch: &mut PendingBatch,
        committed_tx: &watch::Sender<TreeState>,
        check_stored: bool,
        maybe_late: &mut Vec<Attempt>,
        known: Known<'_>,
    ) -> Result<Appended, Retry> {
        let inner = &self.inner;
        let backend = inner.storage.backend_name();
        // Under the sequencing lock the stored state is current: if another frontend
        // advanced it, our edge is stale. (Without this read the compare-and-swap
        // would still catch it, after uploading the batch for nothing.)
        let stored = match check_stored && inner.storage.check_state_before_commit() {
            true => Some(
                inner
                    .storage
                    .load_state()
                    .await
                    .map_err(|e| Retry::Transient(e.to_string()))?
                    .unwrap_or_else(TreeState::empty),
            ),
            false => None,
        };
        let current = match edge.take() {
            Some(e) if stored.is_none_or(|s| s == e.state()) => e,
            _ => match Edge::load(&*inner.storage, &*inner.config.personality, stored).await {
                Ok(e) => {
                    inner.ready.store(true, Ordering::Release);
                    e
                }
                Err(e) => {
                    inner.ready.store(false, Ordering::Release);
                    tracing::error!(error = %e, "cannot reload the tree from storage");
                    return Err(Retry::Transient(e.to_string()));
                }
            },
        };
        let prev = current.state();
        // The stored tree never shrinks and never changes its root at a size: a state
        // behind what this process saw committed was rolled back or deleted behind the
        // log's back (a restored backup, a removed state file or record). Committing on
        // it would hand out indices again and fork the tree: refuse, unready, until the
        // state is put back (invariants 1 and 3).
        let seen = *committed_tx.borrow();
        if prev.size < seen.size || (prev.size == seen.size && prev.root != seen.root) {
            inner.ready.store(false, Ordering::Release);
            let why = format!(
                "the stored tree (size {}) does not extend the tree this process saw committed \
                 (size {}): its state was rolled back, replaced or deleted; not committing on it",
                prev.size, seen.size
            );
            tracing::error!("{why}");
            return Err(Retry::Transient(why));
        }
        if prev.frozen {
            // Frozen by another frontend of the store (or before a restart): refuse
            // every add from now on. An attempt of this batch that landed before the
            // freeze is still found below.
            self.note_frozen();
        }
        // Earlier batches whose outcome is open: learn from the tree this one builds on
        // whether one landed (its entries are logged; this batch goes on top of it) or
        // can no longer land.
        if !known.open.is_empty() {
            let before = known.open.len();
            if let Err(e) = self.learn(prev, known.open, known.index_tx, None).await {
                *edge = Some(current);
                return Err(Retry::Transient(e.to_string()));
            }
            if known.open.len() < before {
                self.advance_to(prev, committed_tx);
            }
        }
        for a in maybe_late.iter() {
            match holds(&*inner.storage, prev, a.next).await {
                Ok(true) => {
                    tracing::warn!(
                        first = a.prev.size,
                        size = a.next.size,
                        "a commit read back as not persisted landed late; its entries are logged"
                    );
                    *edge = Some(current);
                    self.advance(prev, committed_tx);
                    return Ok(Appended {
                        first: a.prev.size,
                        timestamp: Some(a.timestamp),
                    });
                }
                Ok(false) => {}
                Err(_) => {
                    // Cannot tell: the outcome is unknown, resolved before any other
                    // batch commits.
                    *edge = Some(current);
                    return Err(Retry::Unknown);
                }
            }
        }
        if prev.frozen {
            *edge = Some(current);
            return Err(Retry::Frozen);
        }
        // Entries another writer committed that this process has not read yet
        // (another frontend, or a commit of a crashed process of ours landing after the
        // restart; `checked_size`, not the committed size, which a late commit learned
        // or a reload moves past them): the dedup index learns them only later, so a
        // resubmission of one may be in this batch. Checked against them before it is
        // appended: never a second index for an entry the tree already holds.
        let checked = inner.checked_size.load(Ordering::Acquire);
        if inner.dedup.is_some() && prev.size > checked {
            let logged = match self.logged_between(checked, prev.size).await {
                Ok(logged) => logged,
                Err(e) => {
                    *edge = Some(current);
                    return Err(Retry::Transient(e.to_string()));
                }
            };
            if !logged.is_empty() {
                // Every one of them, not only this batch's: a resubmission queued
                // behind this batch, or arriving before the index has them, finds them
                // in flight (the indexer forgets each once it holds it).
                let lookup = |h: &EntryHash| logged.get(h).map(|i| i.index);
                let mut q = lock(&inner.queue);
                let (mut entries, mut bytes) = (0, 0);
                for b in q.batches.iter_mut() {
                    let (n, size) = b.drop_logged(lookup);
                    entries += n;
                    bytes += size;
                }
                q.entries -= entries;
                q.bytes -= bytes;
                for (h, first) in &logged {
                    q.inflight.insert(*h, InFlight::Committed(*first));
                }
                drop(q);
                let (n, _) = batch.drop_logged(lookup);
                if n + entries > 0 {
                    tracing::info!(
                        entries = n + entries,
                        "entries another writer logged were resubmitted here; answered with their indices"
                    );
                }
                if batch.entries.is_empty() {
                    inner.checked_size.fetch_max(prev.size, Ordering::AcqRel);
                    *edge = Some(current);
                    self.advance_to(prev, committed_tx);
                    return Ok(Appended {
                        first: prev.size,
                        timestamp: None,
                    });
                }
            }
        }
        inner.checked_size.fetch_max(prev.size, Ordering::AcqRel);
        // Appended in place, not on a copy: copying the edge would copy its partial
        // bundle (up to 255 entries, ~300 KB for a CT log) once more per batch. A
        // refused write restores it from `undo` instead.
        let undo = current.undo_point();
        let mut next_edge = current;
        let tiles = next_edge
            .append(&*inner.config.personality, &batch.entries, &batch.leaves)
            .map_err(|e| Retry::Bug(e.to_string()))?;
        // Before the commit: a checkpoint signed meanwhile may be a little later than
        // it needed to be, never earlier than an entry it covers.
        inner
            .newest_timestamp
            .fetch_max(next_edge.last_timestamp, Ordering::AcqRel);
        let next = next_edge.state();
        // `append` gave the batch this one timestamp.
        let appended = Appended {
            first: prev.size,
            timestamp: Some(next_edge.last_timestamp),
        };
        let started = Instant::now();
        let outcome = inner
            .storage
            .commit(CommitBatch { prev, next, tiles })
            .await;
        let took = started.elapsed().as_secs_f64();
        metrics::histogram!("tlogd_commit_duration_seconds", "log" => self.inner.config.name.clone(), "backend" => backend).record(took);
        metrics::histogram!("tlogd_storage_op_duration_seconds", "log" => self.inner.config.name.clone(), "backend" => backend, "op" => "commit")
            .record(took);
        match outcome {
            Ok(()) => {
                metrics::histogram!("tlogd_batch_size", "log" => self.inner.config.name.clone())
                    .record(batch.entries.len() as f64);
                *edge = Some(next_edge);
                inner.checked_size.fetch_max(next.size, Ordering::AcqRel);
                self.advance(next, committed_tx);
                // Our swap moved the tree off every state an open outcome was built on,
                // each checked above against `prev`: none can land any more.
                if !known.open.is_empty() {
                    let before = known.open.len();
                    for u in known.open.drain(..) {
                        self.not_logged(&u);
                    }
                    self.outcomes_changed(known.open, before);
                }
                Ok(appended)
            }
            Err(StorageError::Conflict { expected, found }) => {
                metrics::counter!("tlogd_storage_errors_total", "log" => self.inner.config.name.clone(), "backend" => backend, "op" => "commit_conflict").increment(1);
                tracing::info!(
                    expected,
                    found,
                    "tree advanced by another writer; reloading"
                );
                Err(Retry::Conflict)
            }
            Err(StorageError::WritesRefused(reason)) => {
                metrics::counter!("tlogd_storage_errors_total", "log" => self.inner.config.name.clone(), "backend" => backend, "op" => "commit_refused").increment(1);
                // Nothing persisted (a failed write, not a failed sync): the edge we
                // took is still the stored one. (When the batch completed the bundle
                // it cannot be restored in place, and the next attempt reloads it.)
                *edge = next_edge.undo(undo);
                Err(Retry::WritesRefused(reason))
            }
            Err(e) => {
                metrics::counter!("tlogd_storage_errors_total", "log" => self.inner.config.name.clone(), "backend" => backend, "op" => "commit").increment(1);
                tracing::error!(error = %e, size = prev.size, "commit failed; reloading the tree");
                let attempt = Attempt {
                    prev,
                    next,
                    timestamp: next_edge.last_timestamp,
                    settled: !matches!(e, StorageError::Unsettled(_)),
                };
                // Uncertain outcome ("fail but persist" or not): learn it from the
                // committed state.
                match self.resolve(&[attempt]).await {
                    Resolved::Persisted(reloaded) => {
                        let state = reloaded.state();
                        *edge = Some(reloaded);
                        self.advance(state, committed_tx);
                        Ok(appended)
                    }
                    Resolved::NotPersisted(reloaded) => {
                        *edge = Some(reloaded);
                        maybe_late.push(attempt);
                        Err(Retry::Transient(format!(
                            "batch {}..{} was not committed: {e}",
                            prev.size, next.size
                        )))
                    }
                    Resolved::Unknown => {
                        maybe_late.push(Attempt {
                            settled: false,
                            ..attempt
                        });
                        Err(Retry::Unknown)
                    }
                }
            }
        }
    }

    /// The log is frozen: refuse adds from now on (queued batches fail as they reach
    /// the integrator, which finds the stored state frozen).
    fn note_frozen(&self) {
        if !self.inner.frozen.swap(true, Ordering::AcqRel) {
            lock(&self.inner.queue).frozen = true;
            tracing::warn!(
                size = self.committed_size(),
                "the log is frozen: it accepts no more entries"
            );
            metrics::gauge!("tlogd_log_frozen", "log" => self.inner.config.name.clone()).set(1.0);
        }
    }

    /// Freeze the stored tree: one compare-and-swap to the same size and root with the
    /// frozen flag set (a commit of no tiles; [`LogStorage`]'s contract). Under the
    /// sequencing lock, on a freshly read state; a lost race (another frontend
    /// committed) is retried on the grown tree, a failure for up to the commit-retry
    /// time. Idempotent: a tree found frozen (by another frontend, or by an attempt
    /// whose answer was lost) is the outcome wanted.
    async fn freeze_tree(
        &self,
        edge: &mut Option<Edge>,
        committed_tx: &watch::Sender<TreeState>,
        sequencer: &mut Option<Instant>,
    ) -> Result<TreeState, String> {
        let inner = &self.inner;
        let storage = &inner.storage;
        let deadline = Instant::now() + inner.config.commit_retry.max(Duration::from_secs(1));
        let mut backoff = Duration::from_millis(20);
        loop {
            let attempt = async {
                if sequencer.is_none() {
                    storage.acquire_sequencer().await?;
                    *sequencer = Some(Instant::now());
                }
                let current = Edge::load(&**storage, &*inner.config.personality, None).await?;
                let prev = current.state();
                let seen = *committed_tx.borrow();
                if prev.size < seen.size {
                    return Err(StorageError::Corrupt(format!(
                        "the stored tree (size {}) is behind the tree this process saw committed (size {})",
                        prev.size, seen.size
                    )));
                }
                if prev.frozen {
                    *edge = Some(current);
                    return Ok(prev);
                }
                let next = prev.into_frozen();
                storage
                    .commit(CommitBatch {
                        prev,
                        next,
                        tiles: Vec::new(),
                    })
                    .await?;
                let mut frozen = current;
                frozen.frozen = true;
                *edge = Some(frozen);
                Ok(next)
            };
            let reason = match attempt.await {
                Ok(state) => {
                    self.advance(state, committed_tx);
                    self.note_frozen();
                    return Ok(state);
                }
                Err(StorageError::Conflict { .. }) if Instant::now() < deadline => {
                    tracing::info!("the tree moved while freezing; freezing the grown tree");
                    continue;
                }
                Err(e @ StorageError::Corrupt(_)) => return Err(e.to_string()),
                Err(e) => e.to_string(),
            };
            if sequencer.take().is_some() {
                storage.release_sequencer(false).await;
            }
            if Instant::now() + backoff > deadline {
                return Err(format!("the log could not be frozen: {reason}"));
            }
            tracing::warn!(error = %reason, "freezing the log failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// [`Log::advance`] unless `state` is not ahead of what was seen committed.
    fn advance_to(&self, state: TreeState, committed_tx: &watch::Sender<TreeState>) {
        if state.size > committed_tx.borrow().size {
            self.advance(state, committed_tx);
        }
    }

    fn advance(&self, next: TreeState, committed_tx: &watch::Sender<TreeState>) {
        self.inner
            .committed_size
            .store(next.size, Ordering::Release);
        metrics::gauge!("tlogd_integrated_tree_size", "log" => self.inner.config.name.clone())
            .set(next.size as f64);
        committed_tx.send_replace(next);
    }

    /// What the adds of a batch this frontend failed to commit itself are answered.
    /// "Not logged" (`Storage`, `WritesRefused`: HTTP 500, or 503 pushback) frees the
    /// client to send the entry to another frontend. A frontend that forwards cannot
    /// promise it: a process of it before a restart may have forwarded the same entry,
    /// and the sequencing frontend may still commit it (the ties of unanswered
    /// forwards die with the process that made them). There such a failure is "may
    /// be logged" (503: resubmit here, where the check against other writers' entries
    /// finds it once it is logged). Found by `benches/sim.sh` (seed 234224: an entry
    /// answered 500 here was logged from the forward of the process before the crash).
    fn failed_answer(&self, e: AddError) -> AddError {
        match e {
            AddError::Storage(_) | AddError::WritesRefused
                if self.inner.config.forward.is_some() =>
            {
                AddError::Uncertain
            }
            e => e,
        }
    }

    /// The timestamp a batch sequenced at `timestamp` stored with its entries, as the
    /// dedup index keeps it (see [`ToIndex::timestamp`]).
    fn stored_timestamp(&self, timestamp: Option<u64>) -> u64 {
        if self.inner.config.personality.stores_timestamps() {
            timestamp.unwrap_or(0)
        } else {
            0
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Longest a busy integrator keeps the sequencing lock before letting another frontend
/// of a shared store have a turn.
const SEQUENCER_SLICE: Duration = Duration::from_millis(25);

/// The integrator's commit pacing ([`LogConfig::min_commit_interval`]): a commit ends
/// with its batch's writers answered and others waiting in the queue; together they are
/// the writers the engine knows of. Holding a batch until they are all back, or until
/// the interval since the previous commit's start has passed, bounds the commit rate
/// under load (2–2.6× fewer commits and syncs, a lower add p99; measured on 2 cores, a
/// commit costs the CPU only a few appends' worth, so throughput moved from level to
/// +22 %: benches/results/history.md, 2026-11-29 later) without making a small loop of
/// writers wait on a timer, which only ticks in milliseconds.
#[derive(Default)]
struct Pace {
    /// When the last batch was taken, and how many entries it held.
    last: Option<(Instant, usize)>,
    /// Entries waiting when the last commit ended (its own and those queued behind
    /// it); `None` until the integrator next looks at the queue.
    known_waiting: Option<usize>,
}

impl Pace {
    /// Records a batch being taken for commit.
    fn started(&mut self, batch: PendingBatch) -> PendingBatch {
        self.last = Some((Instant::now(), batch.entries.len()));
        self.known_waiting = None;
        batch
    }

    /// Counts the writers known when the last commit ended, the first time the
    /// integrator looks at the queue after it (`queued`: entries queued now).
    fn note_waiting(&mut self, queued: impl FnOnce() -> usize) {
        if let (None, Some((_, len))) = (self.known_waiting, self.last) {
            self.known_waiting = Some(len + queued());
        }
    }

    /// Until when a batch of `len` entries waits for more, if it does, and for how
    /// many.
    fn hold(&self, len: usize, interval: Duration, now: Instant) -> Option<(Instant, usize)> {
        let (start, _) = self.last?;
        let known = self.known_waiting.unwrap_or(0);
        if interval.is_zero() || len >= known {
            return None;
        }
        let until = start + interval;
        (now < until).then_some((until, known))
    }
}

/// What the integrator does next.
enum Work {
    /// Commit a batch.
    Batch(PendingBatch),
    /// Freeze the tree (the queue is empty), then answer these callers.
    Freeze(Vec<tokio::sync::oneshot::Sender<Result<TreeState, String>>>),
    /// Read the tree to learn open outcomes (idle, or a resubmission asks).
    Settle,
}

/// How often an idle integrator with open outcomes reads the tree to learn them.
const SETTLE_EVERY: Duration = Duration::from_millis(500);

/// Longest a resubmission of an entry whose outcome is open waits for it to be
/// learned before it is answered 503 (at most the commit-retry time).
const UNCERTAIN_WAIT: Duration = Duration::from_secs(1);

/// Why a commit attempt did not persist.
enum Retry {
    /// Another writer advanced the tree: re-integrate on the new edge at once.
    Conflict,
    /// Storage failed; retry after a pause while time allows.
    Transient(String),
    /// The batch cannot be integrated (a bug): fail at once, retrying cannot help.
    Bug(String),
    /// The store refuses writes; nothing of the batch persisted.
    WritesRefused(String),
    /// A commit failed and its outcome could not be learned in time.
    Unknown,
    /// The stored tree is frozen (by this or another frontend): nothing is appended.
    Frozen,
}

/// Where a committed batch went.
#[derive(Clone, Copy, Debug)]
struct Appended {
    /// The index of its first entry.
    first: u64,
    /// The timestamp its entries were given (`None` for a batch of no entries).
    timestamp: Option<u64>,
}

/// How a batch ended, when not committed.
enum Outcome {
    /// Known not logged (or a bug).
    Failed(AddError),
    /// Maybe logged, by one of these attempts: resolved before the next batch commits.
    Unknown { attempts: Vec<Attempt> },
}

/// The open outcomes a commit attempt checks the tree against ([`Log::learn`]).
struct Known<'a> {
    open: &'a mut Vec<Unresolved>,
    index_tx: &'a mpsc::UnboundedSender<ToIndex>,
}

/// The committed bundle `id`: a partial bundle of a past size may be gone once its
/// bundle filled up (tlog-tiles "Partial Tiles"), and the full one starts with the same
/// entries.
async fn read_bundle<S: LogStorage>(storage: &S, id: &TileId) -> Result<Vec<u8>, StorageError> {
    match storage.read_tile(id).await? {
        Some(b) => Ok(b),
        None if !id.is_full() => storage
            .read_tile(&id.full())
            .await?
            .ok_or_else(|| StorageError::Corrupt(format!("missing {}", id.path()))),
        None => Err(StorageError::Corrupt(format!("missing {}", id.path()))),
    }
}

pub mod checker;
pub mod import;
pub mod memory;
pub mod objects;
#[cfg(test)]
mod tests;
