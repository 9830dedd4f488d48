//! Open outcomes: what became of a commit whose answer was lost (the durability
//! protocol's "open outcome", told in the module above). An attempt is read back
//! ([`Log::resolve`]); one that may still land stays open, with its entries in flight,
//! until a read proves it landed or can never land ([`Log::settle`], [`Log::learn`]).

use super::*;

impl<S: LogStorage> Log<S> {
    /// Learn what became of the open outcomes (batches answered `Uncertain`), if any,
    /// before the next batch commits: read the stored tree, for up to the commit-retry
    /// time. `Err` if it could not be read (the caller's batch is then not attempted).
    /// An outcome the read cannot decide (its attempt may still land on the tree as
    /// stored) stays open: the commit that follows checks it again on the tree it
    /// builds on ([`Log::learn`]).
    pub(super) async fn settle(
        &self,
        open: &mut Vec<Unresolved>,
        edge: &mut Option<Edge>,
        index_tx: &mpsc::UnboundedSender<ToIndex>,
        committed_tx: &watch::Sender<TreeState>,
        mut batch: Option<&mut PendingBatch>,
    ) -> Result<(), String> {
        if open.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let deadline = Instant::now() + inner.config.commit_retry;
        let mut backoff = Duration::from_millis(20);
        loop {
            let reason = match Edge::load(&*inner.storage, &*inner.config.personality, None).await {
                Ok(reloaded) => {
                    inner.ready.store(true, Ordering::Release);
                    let stored = reloaded.state();
                    match self
                        .learn(stored, open, index_tx, batch.as_deref_mut())
                        .await
                    {
                        Ok(()) => {
                            *edge = Some(reloaded);
                            // Never backwards: a rolled-back state is refused at the
                            // next commit, which compares it with what was seen.
                            if stored.size > committed_tx.borrow().size {
                                self.advance(stored, committed_tx);
                            }
                            return Ok(());
                        }
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => {
                    inner.ready.store(false, Ordering::Release);
                    e.to_string()
                }
            };
            if Instant::now() + backoff > deadline {
                return Err(format!(
                    "an earlier commit's outcome is still unknown: {reason}"
                ));
            }
            tracing::warn!(error = %reason, "cannot read the tree back to learn a commit's outcome; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Check the open outcomes against `stored`, a state the tree had: an attempt
    /// whose `next` it holds landed (its entries are logged: each becomes
    /// [`InFlight::Committed`] until the persistent index holds it, and resubmissions
    /// still queued, in `batch` or the queue, leave their batches with that index,
    /// as [`AddError::Uncertain`] promises); an outcome none of whose attempts can
    /// land any more (each either settled, or built on a state the tree has moved
    /// past: a compare-and-swap from it can never succeed, and a database
    /// transaction on it has ended, since the tree moved under its lock) is closed,
    /// its entries not logged; the rest stay open.
    pub(super) async fn learn(
        &self,
        stored: TreeState,
        open: &mut Vec<Unresolved>,
        index_tx: &mpsc::UnboundedSender<ToIndex>,
        mut batch: Option<&mut PendingBatch>,
    ) -> Result<(), StorageError> {
        let before = open.len();
        let mut i = 0;
        while i < open.len() {
            let mut landed = None;
            for a in &open[i].attempts {
                if holds(&*self.inner.storage, stored, a.next).await? {
                    landed = Some(*a);
                    break;
                }
            }
            let can_land = open[i]
                .attempts
                .iter()
                .any(|a| !a.settled && a.prev == stored);
            match landed {
                Some(a) => {
                    let u = open.remove(i);
                    self.logged_late(u, a.prev.size, a.timestamp, index_tx, batch.as_deref_mut());
                }
                None if !can_land => {
                    let u = open.remove(i);
                    self.not_logged(&u);
                }
                None => i += 1,
            }
        }
        self.outcomes_changed(open, before);
        Ok(())
    }

    /// After `open` went from `before` outcomes to what it holds: the idle integrator
    /// watches the tree while any is open, and resubmissions waiting on one look again
    /// once one is learned (not on every read: they would ask for the next read at
    /// once, and spin).
    pub(super) fn outcomes_changed(&self, open: &[Unresolved], before: usize) {
        self.inner
            .open_outcomes
            .store(!open.is_empty(), Ordering::Release);
        if open.len() < before {
            self.inner.learned.send_modify(|n| *n += 1);
        }
    }

    /// An open outcome's batch turned out logged from index `first`.
    pub(super) fn logged_late(
        &self,
        u: Unresolved,
        first: u64,
        timestamp: u64,
        index_tx: &mpsc::UnboundedSender<ToIndex>,
        batch: Option<&mut PendingBatch>,
    ) {
        tracing::warn!(
            first,
            entries = u.hashes.len(),
            "an uncertain commit did persist; its entries are logged"
        );
        if self.inner.dedup.is_none() {
            return;
        }
        let logged: HashMap<EntryHash, u64> = u.hashes.iter().copied().zip(first..).collect();
        let timestamp = self.stored_timestamp(Some(timestamp));
        let mut q = lock(&self.inner.queue);
        for (h, &index) in &logged {
            q.inflight
                .insert(*h, InFlight::Committed(Indexed { index, timestamp }));
        }
        let lookup = |h: &EntryHash| logged.get(h).copied();
        let (mut entries, mut bytes) = (0, 0);
        for b in batch.into_iter().chain(q.batches.iter_mut()) {
            let (n, size) = b.drop_logged(lookup);
            entries += n;
            bytes += size;
        }
        q.entries -= entries;
        q.bytes -= bytes;
        drop(q);
        if entries > 0 {
            tracing::info!(
                entries,
                "resubmissions of an uncertain commit answered with its indices"
            );
        }
        let _ = index_tx.send(ToIndex {
            first,
            timestamp,
            hashes: u.hashes,
        });
    }

    /// An open outcome's batch can no longer land: its entries are not logged, and a
    /// resubmission may queue them.
    pub(super) fn not_logged(&self, u: &Unresolved) {
        tracing::info!(
            entries = u.hashes.len(),
            "an uncertain commit can no longer land; its entries were not logged"
        );
        let mut q = lock(&self.inner.queue);
        for h in &u.hashes {
            if matches!(
                q.inflight.get(h),
                Some(InFlight::Uncertain { forwarded: false })
            ) {
                q.inflight.remove(h);
            }
        }
    }

    /// After commits of one batch (`attempts`: each `prev` → `next`) failed in a way
    /// that may have persisted ("fail but persist"), read the stored tree until it tells
    /// whether one did, for up to the commit-retry time. Never guesses: re-appending a
    /// batch that did persist would log it twice.
    pub(super) async fn resolve(&self, attempts: &[Attempt]) -> Resolved {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.config.commit_retry;
        let mut backoff = Duration::from_millis(20);
        loop {
            let reason = match Edge::load(&*inner.storage, &*inner.config.personality, None).await {
                Ok(reloaded) => {
                    inner.ready.store(true, Ordering::Release);
                    let stored = reloaded.state();
                    let mut found = Ok(false);
                    for a in attempts {
                        match holds(&*inner.storage, stored, a.next).await {
                            Ok(true) => {
                                found = Ok(true);
                                break;
                            }
                            Ok(false) => {}
                            Err(e) => found = Err(e),
                        }
                    }
                    match found {
                        Ok(true) => return Resolved::Persisted(reloaded),
                        Ok(false) => return Resolved::NotPersisted(reloaded),
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => {
                    inner.ready.store(false, Ordering::Release);
                    e.to_string()
                }
            };
            if Instant::now() + backoff > deadline {
                tracing::warn!(error = %reason, "a commit's outcome could not be learned in time");
                return Resolved::Unknown;
            }
            let size = attempts.first().map_or(0, |a| a.prev.size);
            tracing::warn!(error = %reason, size, "cannot read the tree back to learn a commit's outcome; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

/// One failed attempt to commit a batch, which may have persisted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Attempt {
    /// The state the batch was built on.
    pub(super) prev: TreeState,
    /// The state it would have committed.
    pub(super) next: TreeState,
    /// The timestamp its entries were given.
    pub(super) timestamp: u64,
    /// Whether, once read back as not persisted, it can no longer land
    /// ([`StorageError::Backend`]; [`StorageError::Unsettled`]: it may).
    pub(super) settled: bool,
}

/// A batch whose commit outcome is not known yet.
pub(super) struct Unresolved {
    pub(super) attempts: Vec<Attempt>,
    pub(super) hashes: Vec<EntryHash>,
}

/// What reading the tree back told of an uncertain commit.
pub(super) enum Resolved {
    /// The batch is in the tree; the edge reloaded.
    Persisted(Edge),
    /// It is not; the edge reloaded.
    NotPersisted(Edge),
    /// Storage could not be read in time.
    Unknown,
}

/// Whether the stored tree, at state `stored`, contains the commit that would have
/// moved some earlier state to `attempt`. The state moves only by compare-and-swap, so
/// a tree smaller than `attempt` does not (yet) hold it, one of the same size holds it
/// iff it is `attempt`, and a larger one (another frontend committed on top) iff its
/// root at `attempt.size` is `attempt.root`.
pub(super) async fn holds<S: LogStorage>(
    storage: &S,
    stored: TreeState,
    attempt: TreeState,
) -> Result<bool, StorageError> {
    if stored.size <= attempt.size {
        // Frozen since or not: the same tree.
        return Ok(stored.same_tree(&attempt));
    }
    Ok(root_at(storage, attempt.size, stored.size).await? == attempt.root)
}

/// The root of the stored tree at `size`, which may be smaller than the stored tree's
/// `stored` size. Each tile `size` needs is read at its own width or, when that partial
/// was never stored (`size` is not where any committed batch ended, or a later batch
/// completed the tile), at the width it has at `stored`, whose first hashes are the same
/// (tlog-tiles "Partial Tiles": tiles are prefix-stable). The tiles at `stored` exist:
/// the caller has just loaded the edge there. So a size the stored tree never stopped
/// at (a commit that did not persist, on a tree another frontend advanced) is answered
/// with a root that differs, not with a missing tile that would keep the outcome
/// unknown.
pub(super) async fn root_at<S: LogStorage>(
    storage: &S,
    size: u64,
    stored: u64,
) -> Result<Hash, StorageError> {
    let ids = crate::proof::tree_root_tiles(size);
    let found = storage.read_tiles(&ids).await?;
    let mut tiles: std::collections::HashMap<TileId, Vec<Hash>> = Default::default();
    for (id, bytes) in ids.iter().zip(found) {
        let hashes = match bytes {
            Some(b) => tile::parse_hash_tile(&b, id.width)
                .map_err(|e| StorageError::Corrupt(format!("{}: {e}", id.path())))?,
            None => {
                let TileKind::Hash { level } = id.kind else {
                    return Err(StorageError::Corrupt(format!(
                        "not a hash tile: {}",
                        id.path()
                    )));
                };
                let count = stored
                    .checked_shr(tile::TILE_HEIGHT * level as u32)
                    .unwrap_or(0);
                let width = count
                    .saturating_sub(id.index * tile::TILE_WIDTH)
                    .min(tile::TILE_WIDTH) as u16;
                if width < id.width {
                    return Err(StorageError::Corrupt(format!(
                        "tile {} is beyond the stored tree of size {stored}",
                        id.path()
                    )));
                }
                let wider = TileId::hash(level, id.index, width);
                let bytes = storage.read_tile(&wider).await?.ok_or_else(|| {
                    StorageError::Corrupt(format!("missing tile {}", wider.path()))
                })?;
                let mut hashes = tile::parse_hash_tile(&bytes, width)
                    .map_err(|e| StorageError::Corrupt(format!("{}: {e}", wider.path())))?;
                hashes.truncate(id.width as usize);
                hashes
            }
        };
        tiles.insert(*id, hashes);
    }
    crate::proof::tree_root(size, &tiles).map_err(|e| StorageError::Corrupt(e.to_string()))
}
