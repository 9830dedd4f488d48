//! The bounded in-memory sequencing queue and the per-batch completion slot.
//!
//! Adds are appended to the newest open [`PendingBatch`]; the integrator pops whole
//! batches. Every entry of a batch waits on the batch's one [`BatchSlot`] and learns its
//! index as `first_index + position`, so the hot path allocates nothing per entry
//! beyond the entry bytes themselves.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::Notify;

use super::AddError;
use super::dedup::EntryHash;
use crate::hash::Hash;

/// Completion of one batch: the index of its first entry, or why it failed.
#[derive(Default)]
pub(crate) struct BatchSlot {
    result: OnceLock<Result<u64, AddError>>,
    notify: Notify,
}

impl BatchSlot {
    /// Resolve the slot and wake every waiter. Only the first call has an effect.
    pub(crate) fn complete(&self, result: Result<u64, AddError>) {
        let _ = self.result.set(result);
        self.notify.notify_waiters();
    }

    /// Wait for [`BatchSlot::complete`].
    pub(crate) async fn wait(&self) -> Result<u64, AddError> {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Register before checking, so a completion in between is not missed.
            notified.as_mut().enable();
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            notified.await;
        }
    }
}

/// Entries sequenced together: they are committed (or fail) as one.
pub(crate) struct PendingBatch {
    pub(crate) entries: Vec<Bytes>,
    pub(crate) leaves: Vec<Hash>,
    /// Entry hashes, only when dedup is on (same order as `entries`).
    pub(crate) hashes: Vec<EntryHash>,
    pub(crate) bytes: usize,
    pub(crate) slot: Arc<BatchSlot>,
}

/// A batch dropped unanswered (its integrator panicked, or the log failed and drained
/// its queue) answers its adds with an error instead of leaving them waiting forever.
/// After [`BatchSlot::complete`] this does nothing.
impl Drop for PendingBatch {
    fn drop(&mut self) {
        self.slot.complete(Err(AddError::Internal(
            "the log stopped before this entry was committed".into(),
        )));
    }
}

impl PendingBatch {
    fn with_capacity(n: usize, dedup: bool) -> Self {
        PendingBatch {
            entries: Vec::with_capacity(n),
            leaves: Vec::with_capacity(n),
            hashes: Vec::with_capacity(if dedup { n } else { 0 }),
            bytes: 0,
            slot: Arc::default(),
        }
    }
}

/// Where a deduplicated entry stands.
pub(crate) enum InFlight {
    /// Queued or being committed: wait on the slot.
    Pending(Arc<BatchSlot>, u32),
    /// Committed at this index but not yet in the persistent index.
    Committed(u64),
}

/// The queue proper, behind one mutex held only for pushes and pops.
pub(crate) struct Queue {
    pub(crate) batches: VecDeque<PendingBatch>,
    /// Entries and bytes queued or being committed (released after the commit).
    pub(crate) entries: usize,
    pub(crate) bytes: usize,
    pub(crate) closed: bool,
    /// Dedup layer above the persistent index: in-flight and not-yet-indexed entries.
    /// Keyed by digests of client-chosen bytes, so seeded (no one can aim entries at
    /// one bucket); foldhash, several times cheaper than std's SipHash for these keys.
    pub(crate) inflight: HashMap<EntryHash, InFlight, foldhash::fast::RandomState>,
}

/// What a push gave back.
pub(crate) enum Pushed {
    /// Wait on this slot; the entry's index is `first + position`.
    Queued(Arc<BatchSlot>, u32),
    /// An identical entry is already in flight at this slot and position.
    DuplicatePending(Arc<BatchSlot>, u32),
    /// An identical entry is already committed at this index.
    DuplicateCommitted(u64),
}

/// Limits the queue enforces (see [`super::LogConfig`]).
pub(crate) struct QueueLimits {
    pub(crate) batch_max_entries: usize,
    pub(crate) max_entries: usize,
    pub(crate) max_bytes: usize,
}

impl Queue {
    pub(crate) fn new() -> Self {
        Queue {
            batches: VecDeque::new(),
            entries: 0,
            bytes: 0,
            closed: false,
            inflight: HashMap::default(),
        }
    }

    /// Append one validated entry, or refuse it (full, closed) without side effects.
    /// Whether `hash` is queued, committing, or committed but not yet indexed.
    pub(crate) fn is_in_flight(&self, hash: &EntryHash) -> bool {
        self.inflight.contains_key(hash)
    }

    pub(crate) fn push(
        &mut self,
        limits: &QueueLimits,
        entry: Bytes,
        leaf: Hash,
        hash: Option<EntryHash>,
    ) -> Result<Pushed, AddError> {
        if self.closed {
            return Err(AddError::ShuttingDown);
        }
        if let Some(h) = &hash {
            match self.inflight.get(h) {
                Some(InFlight::Pending(slot, pos)) => {
                    return Ok(Pushed::DuplicatePending(slot.clone(), *pos));
                }
                Some(InFlight::Committed(index)) => return Ok(Pushed::DuplicateCommitted(*index)),
                None => {}
            }
        }
        if self.entries >= limits.max_entries || self.bytes + entry.len() > limits.max_bytes {
            return Err(AddError::QueueFull);
        }
        let open =
            matches!(self.batches.back(), Some(b) if b.entries.len() < limits.batch_max_entries);
        if !open {
            // A small start, grown by doubling: most batches are far below the limit
            // (~90 entries at 256 writers), and three vectors sized for 4096 entries
            // were 384 KiB per batch, each a large allocation of its own.
            self.batches.push_back(PendingBatch::with_capacity(
                limits.batch_max_entries.min(64),
                hash.is_some(),
            ));
        }
        let Some(batch) = self.batches.back_mut() else {
            return Err(AddError::Internal("queue has no open batch".into()));
        };
        let pos = batch.entries.len() as u32;
        self.entries += 1;
        self.bytes += entry.len();
        batch.bytes += entry.len();
        batch.entries.push(entry);
        batch.leaves.push(leaf);
        if let Some(h) = hash {
            batch.hashes.push(h);
            self.inflight
                .insert(h, InFlight::Pending(batch.slot.clone(), pos));
        }
        Ok(Pushed::Queued(batch.slot.clone(), pos))
    }
}
