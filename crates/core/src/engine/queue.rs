//! The bounded in-memory sequencing queue and the per-batch completion slot.
//!
//! Adds are appended to the newest open [`PendingBatch`]; the integrator pops whole
//! batches. Every entry of a batch waits on the batch's one [`BatchSlot`] and learns its
//! index as `first_index + position`, so the hot path allocates nothing per entry
//! beyond the entry bytes themselves. The one exception: entries found already logged
//! while queued (resubmissions of a batch whose uncertain commit turned out to have
//! persisted) leave their batch before it commits, and the slot's [`Placed`] says where
//! they are and how the positions after them shift.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::Notify;

use super::dedup::{EntryHash, Indexed};
use super::{AddError, AddOutcome};
use crate::hash::Hash;

/// Where a committed batch's entries are.
#[derive(Clone, Debug)]
pub(crate) struct Placed {
    /// The index of the batch's first committed entry.
    pub(crate) first: u64,
    /// Positions (as pushed) of entries that left the batch because they were already
    /// logged, sorted, each with the index where they are. `None` on the hot path: no
    /// allocation, no shared counter touched by every waiter.
    pub(crate) dropped: Option<Arc<[(u32, u64)]>>,
    /// For a batch another frontend sequenced ([`super::forward`]): what became of
    /// each entry, by position as pushed. Overrides `first` and `dropped`.
    pub(crate) each: Option<Arc<[Placement]>>,
    /// The timestamp the batch was sequenced with (ms since the Unix epoch); `None`
    /// when not known here (a batch found logged after an uncertain commit).
    pub(crate) timestamp: Option<u64>,
}

/// Where one entry is (its index, whether it was already logged, its timestamp when
/// known), or why not.
pub(crate) type Placement = Result<AddOutcome, AddError>;

impl Placed {
    /// Where the entry pushed at `pos` is: its index, whether it was already logged
    /// there, and (for an entry this batch appended) the batch's timestamp.
    pub(crate) fn index_of(&self, pos: u32) -> Placement {
        if let Some(each) = &self.each {
            return each.get(pos as usize).cloned().unwrap_or_else(|| {
                Err(AddError::Internal(format!(
                    "no forwarded outcome for position {pos}"
                )))
            });
        }
        let appended = |index| AddOutcome {
            index,
            duplicate: false,
            timestamp: self.timestamp,
        };
        let Some(dropped) = &self.dropped else {
            return Ok(appended(self.first + pos as u64));
        };
        Ok(match dropped.binary_search_by_key(&pos, |&(p, _)| p) {
            // Logged by an earlier batch: its timestamp is in the log, not here.
            Ok(i) => AddOutcome::duplicate(dropped[i].1),
            // `i` dropped entries were pushed before this one.
            Err(i) => appended(self.first + pos as u64 - i as u64),
        })
    }
}

/// Completion of one batch: where its entries are, or why it failed.
#[derive(Default)]
pub(crate) struct BatchSlot {
    result: OnceLock<Result<Placed, AddError>>,
    notify: Notify,
}

impl BatchSlot {
    /// Resolve the slot and wake every waiter. Only the first call has an effect.
    pub(crate) fn complete(&self, result: Result<Placed, AddError>) {
        let _ = self.result.set(result);
        self.notify.notify_waiters();
    }

    /// Wait for [`BatchSlot::complete`].
    pub(crate) async fn wait(&self) -> Result<Placed, AddError> {
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
    /// Entries that left the batch already logged (see [`Placed::dropped`]), sorted
    /// by position.
    pub(crate) dropped: Vec<(u32, u64)>,
    /// Holds entries another frontend forwarded here: committed here, never forwarded
    /// on ([`super::forward`]).
    pub(crate) pinned: bool,
    /// Entries resubmitted after a forward of them went unanswered
    /// ([`InFlight::Uncertain`] `forwarded`): the sequencing frontend may hold them, so
    /// this batch is only ever forwarded, never committed here.
    pub(crate) forward_only: Vec<EntryHash>,
}

/// A batch dropped unanswered (its integrator panicked or was aborted while it
/// committed, or the log failed and drained its queue) answers its adds instead of
/// leaving them waiting forever: "may be logged" ([`AddError::Uncertain`]), since a
/// commit under way when it stopped may have persisted. After [`BatchSlot::complete`]
/// this does nothing.
impl Drop for PendingBatch {
    fn drop(&mut self) {
        self.slot.complete(Err(AddError::Uncertain));
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
            dropped: Vec::new(),
            pinned: false,
            forward_only: Vec::new(),
        }
    }

    /// The position (as pushed) of the entry now at `i`: `i` plus the entries that left
    /// before it.
    pub(crate) fn pushed_position(&self, i: usize) -> u32 {
        let mut pos = i as u32;
        for &(p, _) in &self.dropped {
            if p <= pos {
                pos += 1;
            } else {
                break;
            }
        }
        pos
    }

    /// Take out every entry `logged` finds already logged, remembering where it is;
    /// returns how many entries and bytes left. Only with dedup on (`hashes` filled).
    pub(crate) fn drop_logged(
        &mut self,
        logged: impl Fn(&EntryHash) -> Option<u64>,
    ) -> (usize, usize) {
        let at: Vec<Option<u64>> = self.hashes.iter().map(logged).collect();
        if at.iter().all(Option::is_none) {
            return (0, 0);
        }
        let entries = std::mem::take(&mut self.entries);
        let leaves = std::mem::take(&mut self.leaves);
        let hashes = std::mem::take(&mut self.hashes);
        let mut left = Vec::new();
        let mut bytes = 0;
        for (i, ((e, l), h)) in entries.into_iter().zip(leaves).zip(hashes).enumerate() {
            match at[i] {
                Some(index) => {
                    left.push((self.pushed_position(i), index));
                    bytes += e.len();
                }
                None => {
                    self.entries.push(e);
                    self.leaves.push(l);
                    self.hashes.push(h);
                }
            }
        }
        self.bytes -= bytes;
        let n = left.len();
        self.dropped.extend(left);
        self.dropped.sort_unstable_by_key(|&(p, _)| p);
        (n, bytes)
    }
}

/// Where a deduplicated entry stands.
pub(crate) enum InFlight {
    /// Queued or being committed: wait on the slot.
    Pending(Arc<BatchSlot>, u32),
    /// Committed (at this index, with this timestamp) but not yet in the persistent
    /// index.
    Committed(Indexed),
    /// Maybe logged, index unknown: a commit of it failed in a way that may still land
    /// (the integrator's open outcomes), or (`forwarded`) a forward of it went
    /// unanswered and the sequencing frontend may hold it. Never queued for a second
    /// index meanwhile: a resubmission waits for the outcome (503 if it stays open),
    /// or, if forwarded, is only forwarded again.
    Uncertain { forwarded: bool },
}

/// The queue proper, behind one mutex held only for pushes and pops.
pub(crate) struct Queue {
    pub(crate) batches: VecDeque<PendingBatch>,
    /// Entries and bytes queued or being committed (released after the commit).
    pub(crate) entries: usize,
    pub(crate) bytes: usize,
    pub(crate) closed: bool,
    /// The log is frozen, or a freeze was asked for: adds are refused
    /// ([`AddError::Frozen`]); batches already queued still commit first.
    pub(crate) frozen: bool,
    /// Callers of [`Log::freeze`](super::Log::freeze) waiting for the integrator to
    /// freeze the tree once the queue is empty.
    pub(crate) freezes: Vec<tokio::sync::oneshot::Sender<Result<super::TreeState, String>>>,
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
    /// An identical entry is already committed, here.
    DuplicateCommitted(Indexed),
    /// An identical entry may be logged by a commit whose outcome is still open: wait
    /// for it to be learned ([`InFlight::Uncertain`]).
    Uncertain,
}

/// Why a batch's entries may be logged though its adds got no index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Uncertainty {
    /// A commit of it here may still land (the integrator keeps the outcome open).
    Local,
    /// A forward of it went unanswered: the sequencing frontend may hold it.
    Forwarded,
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
            frozen: false,
            freezes: Vec::new(),
            inflight: HashMap::default(),
        }
    }

    /// Append one validated entry, or refuse it (full, closed) without side effects.
    /// Whether `hash` is queued, committing, or committed but not yet indexed.
    pub(crate) fn is_in_flight(&self, hash: &EntryHash) -> bool {
        self.inflight.contains_key(hash)
    }

    /// After `batch` ended unlogged or with its outcome unknown: its entries that
    /// still point at it leave the in-flight map, except those that may be logged,
    /// which become [`InFlight::Uncertain`]: all of them when `maybe` (the batch's own
    /// commit or forward may have landed), and those of `forward_only` always (an
    /// earlier forward of them may have). A resubmission queued since in another
    /// batch keeps its own record.
    pub(crate) fn release(&mut self, batch: &PendingBatch, maybe: Option<Uncertainty>) {
        for h in &batch.hashes {
            if !matches!(self.inflight.get(h), Some(InFlight::Pending(slot, _)) if Arc::ptr_eq(slot, &batch.slot))
            {
                continue;
            }
            let forwarded = batch.forward_only.contains(h);
            match maybe {
                Some(Uncertainty::Local) => {
                    // An earlier forward of it stays the reason to forward it again.
                    self.inflight.insert(*h, InFlight::Uncertain { forwarded });
                }
                Some(Uncertainty::Forwarded) => {
                    self.inflight
                        .insert(*h, InFlight::Uncertain { forwarded: true });
                }
                None if forwarded => {
                    self.inflight
                        .insert(*h, InFlight::Uncertain { forwarded: true });
                }
                None => {
                    self.inflight.remove(h);
                }
            }
        }
    }

    /// What [`Queue::push`] would refuse a new entry of `len` bytes with now (not
    /// counting what the in-flight map answers without queueing).
    pub(crate) fn refusal(&self, limits: &QueueLimits, len: usize) -> Option<AddError> {
        if self.closed {
            Some(AddError::ShuttingDown)
        } else if self.frozen {
            Some(AddError::Frozen)
        } else if self.entries >= limits.max_entries || self.bytes + len > limits.max_bytes {
            Some(AddError::QueueFull)
        } else {
            None
        }
    }

    pub(crate) fn push(
        &mut self,
        limits: &QueueLimits,
        entry: Bytes,
        leaf: Hash,
        hash: Option<EntryHash>,
        pinned: bool,
    ) -> Result<Pushed, AddError> {
        if self.closed {
            return Err(AddError::ShuttingDown);
        }
        if self.frozen {
            return Err(AddError::Frozen);
        }
        if let Some(h) = &hash {
            match self.inflight.get(h) {
                Some(InFlight::Pending(slot, pos)) => {
                    return Ok(Pushed::DuplicatePending(slot.clone(), *pos));
                }
                Some(InFlight::Committed(index)) => return Ok(Pushed::DuplicateCommitted(*index)),
                Some(InFlight::Uncertain { forwarded: false }) => return Ok(Pushed::Uncertain),
                Some(InFlight::Uncertain { forwarded: true }) | None => {}
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
        // Positions count the entries that left the batch too: theirs are taken.
        let pos = (batch.entries.len() + batch.dropped.len()) as u32;
        self.entries += 1;
        self.bytes += entry.len();
        batch.bytes += entry.len();
        batch.entries.push(entry);
        batch.leaves.push(leaf);
        batch.pinned |= pinned;
        if let Some(h) = hash {
            batch.hashes.push(h);
            let was = self
                .inflight
                .insert(h, InFlight::Pending(batch.slot.clone(), pos));
            if matches!(was, Some(InFlight::Uncertain { forwarded: true })) {
                batch.forward_only.push(h);
            }
        }
        Ok(Pushed::Queued(batch.slot.clone(), pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries found already logged leave their batch in two rounds, one of them
    /// pushed after the first round: every entry's index still comes out right, the
    /// dropped ones at the indices they were logged at, the others packed after the
    /// batch's first index in push order.
    #[test]
    fn entries_leaving_a_batch_keep_every_other_entrys_index() {
        let limits = QueueLimits {
            batch_max_entries: 16,
            max_entries: 100,
            max_bytes: 1 << 20,
        };
        let mut q = Queue::new();
        let hash = |i: u8| [i; 32];
        let push = |q: &mut Queue, i: u8| match q.push(
            &limits,
            Bytes::from(vec![i]),
            [0; 32],
            Some(hash(i)),
            false,
        ) {
            Ok(Pushed::Queued(_, pos)) => pos,
            _ => panic!("push {i}"),
        };
        let first: Vec<u32> = (0..5).map(|i| push(&mut q, i)).collect();
        assert_eq!(first, [0, 1, 2, 3, 4]);
        let batch = q.batches.back_mut().unwrap();
        // Entries 1 and 3 were logged at 100 and 101.
        assert_eq!(
            batch.drop_logged(|h| [(hash(1), 100), (hash(3), 101)]
                .iter()
                .find(|(k, _)| k == h)
                .map(|(_, i)| *i)),
            (2, 2)
        );
        // Pushed after: takes the next position, not a dropped one's.
        assert_eq!(push(&mut q, 5), 5);
        let batch = q.batches.back_mut().unwrap();
        // Entry 4 too, at 102.
        assert_eq!(
            batch.drop_logged(|h| (*h == hash(4)).then_some(102)),
            (1, 1)
        );
        assert_eq!(batch.entries, [vec![0u8], vec![2], vec![5]]);
        let placed = Placed {
            first: 10,
            dropped: Some(std::mem::take(&mut batch.dropped).into()),
            each: None,
            timestamp: Some(7),
        };
        let got: Vec<(u64, bool)> = (0..6)
            .map(|pos| placed.index_of(pos).unwrap())
            .map(|o| {
                assert_eq!(o.timestamp, (!o.duplicate).then_some(7));
                (o.index, o.duplicate)
            })
            .collect();
        assert_eq!(
            got,
            [
                (10, false),
                (100, true),
                (11, false),
                (101, true),
                (102, true),
                (12, false)
            ]
        );
    }
}
