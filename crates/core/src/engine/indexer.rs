//! The dedup follower (step 5 of the protocol): committed entry hashes go to the
//! persistent index in batches, off the commit path; at start it catches up from the
//! tree. And the read of which entries a range of the tree holds, which the
//! integrator's check against other writers' entries uses too.

use super::*;

impl<S: LogStorage> Log<S> {
    /// The dedup follower: catch up from the log, then index each committed batch.
    pub(super) async fn run_indexer(
        self,
        mut rx: mpsc::UnboundedReceiver<ToIndex>,
        mut indexed: u64,
    ) {
        let inner = &self.inner;
        let Some(index) = inner.dedup.clone() else {
            return;
        };
        // Catch up from the bundles of entries committed before the index saw them.
        let target = self.committed_size();
        if indexed < target {
            tracing::info!(
                from = indexed,
                to = target,
                "dedup index catching up from the log"
            );
        }
        while indexed < target {
            match self.read_hashes(indexed, target).await {
                Ok(batch) => {
                    let upto = indexed + batch.len() as u64;
                    if let (_, Err(e)) = put_blocking(&index, batch, upto).await {
                        if self.is_closed() {
                            tracing::error!(error = %e, "dedup catch-up abandoned at shutdown");
                            return;
                        }
                        tracing::error!(error = %e, "dedup catch-up write failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                    indexed = upto;
                    inner.indexed_size.store(indexed, Ordering::Release);
                    metrics::gauge!("tlogd_dedup_lag", "log" => self.inner.config.name.clone())
                        .set(self.dedup_lag() as f64);
                }
                Err(e) => {
                    if self.is_closed() {
                        tracing::error!(error = %e, "dedup catch-up abandoned at shutdown");
                        return;
                    }
                    tracing::error!(error = %e, "dedup catch-up read failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        let mut batch: Vec<(EntryHash, Indexed)> = Vec::new();
        while let Some(message) = rx.recv().await {
            batch.clear();
            let mut messages = vec![message];
            while let Ok(m) = rx.try_recv() {
                messages.push(m);
            }
            // The next index the index must cover: entries are indexed without gaps,
            // so the marker never jumps past entries it does not hold.
            let mut next = indexed;
            for ToIndex {
                first,
                timestamp,
                hashes,
            } in messages
            {
                // Entries between our batches were committed by other frontends
                // sharing the store: read them back.
                while next < first {
                    match self.read_hashes(next, first).await {
                        Ok(read) => {
                            next += read.len() as u64;
                            batch.extend(read);
                        }
                        Err(e) if self.is_closed() => {
                            tracing::error!(error = %e, "dedup gap fill abandoned at shutdown");
                            return;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "dedup gap fill read failed; retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
                let end = first + hashes.len() as u64;
                // Entries below the marker were covered already (catch-up).
                batch.extend(
                    hashes
                        .into_iter()
                        .zip(first..)
                        .filter(|(_, i)| *i >= next)
                        .map(|(h, index)| (h, Indexed { index, timestamp })),
                );
                next = next.max(end);
            }
            let Some(&(_, last)) = batch.last() else {
                continue;
            };
            let upto = last.index + 1;
            loop {
                let (back, result) = put_blocking(&index, batch, upto).await;
                batch = back;
                match result {
                    Ok(()) => break,
                    Err(e) if self.is_closed() => {
                        // The follower catches up from the log at the next start.
                        tracing::error!(error = %e, "dedup index write abandoned at shutdown");
                        return;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "dedup index write failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            indexed = upto;
            inner.indexed_size.store(indexed, Ordering::Release);
            {
                let mut q = lock(&inner.queue);
                for (h, i) in &batch {
                    if matches!(q.inflight.get(h), Some(InFlight::Committed(c)) if c.index == i.index)
                    {
                        q.inflight.remove(h);
                    }
                }
            }
            metrics::gauge!("tlogd_dedup_lag", "log" => self.inner.config.name.clone())
                .set(self.dedup_lag() as f64);
        }
        // Shutting down: persist what the index holds in memory, so the next start has
        // nothing to re-index.
        match tokio::task::spawn_blocking(move || index.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "dedup index flush at shutdown failed; the next start re-indexes from the log")
            }
            Err(e) => tracing::error!(error = %e, "dedup index flush at shutdown failed"),
        }
    }

    /// The committed entries `[from, to)`: each one's dedup key and where it is (the
    /// first place, should one be there twice).
    pub(super) async fn logged_between(
        &self,
        from: u64,
        to: u64,
    ) -> Result<HashMap<EntryHash, Indexed>, StorageError> {
        let mut found = HashMap::new();
        let mut at = from;
        while at < to {
            let read = self.read_hashes(at, to).await?;
            if read.is_empty() {
                break;
            }
            at += read.len() as u64;
            for (h, i) in read {
                found.entry(h).or_insert(i);
            }
        }
        Ok(found)
    }

    /// What the dedup index holds for the entries `[from, to)`, read back from the
    /// stored bundles.
    pub(super) async fn read_hashes(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(EntryHash, Indexed)>, StorageError> {
        let storage = &self.inner.storage;
        let personality = &*self.inner.config.personality;
        let mut out = Vec::new();
        let mut n = from / TILE_WIDTH;
        // At most 64 bundles (16,384 entries) per call keeps catch-up memory bounded.
        let end = to.min((n + 64) * TILE_WIDTH);
        while n * TILE_WIDTH < end {
            let width = (to - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
            let id = TileId {
                kind: personality.bundle_kind(),
                index: n,
                width,
            };
            let bytes = read_bundle(&**storage, &id).await?;
            let entries = personality
                .split_bundle(&bytes)
                .map_err(|e| StorageError::Corrupt(format!("{}: {e}", id.path())))?;
            for (i, e) in entries.iter().enumerate() {
                let idx = n * TILE_WIDTH + i as u64;
                if idx >= from && idx < end {
                    let first = Indexed {
                        index: idx,
                        timestamp: e.timestamp,
                    };
                    out.push((personality.stored_dedup_key(e), first));
                }
            }
            n += 1;
        }
        Ok(out)
    }
}

/// A committed batch on its way to the dedup index.
pub(super) struct ToIndex {
    /// The index of its first entry.
    pub(super) first: u64,
    /// The timestamp its entries were stored with (0 for a personality whose entries
    /// carry none: the index holds what the log holds).
    pub(super) timestamp: u64,
    /// Its entries' dedup keys, in order.
    pub(super) hashes: Vec<EntryHash>,
}

/// `put_batch` on a blocking thread, or on this task when the index says it will not
/// block ([`DedupIndex::put_is_cheap`]: RocksDB between two table writes). Gives the
/// batch back for a retry.
pub(super) async fn put_blocking(
    index: &Arc<dyn DedupIndex>,
    batch: Vec<(EntryHash, Indexed)>,
    upto: u64,
) -> (Vec<(EntryHash, Indexed)>, Result<(), DedupError>) {
    if index.put_is_cheap(batch.len()) {
        let r = index.put_batch(&batch, upto);
        return (batch, r);
    }
    let index = index.clone();
    match tokio::task::spawn_blocking(move || {
        let r = index.put_batch(&batch, upto);
        (batch, r)
    })
    .await
    {
        Ok(out) => out,
        Err(e) => (Vec::new(), Err(DedupError(e.to_string()))),
    }
}
