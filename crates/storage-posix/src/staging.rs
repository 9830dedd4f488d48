//! The commit path: a batch's full tiles staged, the state slot written (the commit
//! point), the tiles handed to the flusher thread, and the flush that makes them
//! durable and renames them to their public paths. Commit protocol steps 1 to 6,
//! numbered in the code where each happens; crate invariants 3 to 5.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tlogd_core::engine::{CommitBatch, StorageError, TreeState};
use tlogd_core::tile::TileId;

use crate::edge::{bundle_kind, edge_ids};
use crate::slot::{Committed, SLOTS, encode_slot, write_in_place};
use crate::store::{DirSync, Inner, Pending};
use crate::sync::{self, SyncMethod};

/// Above this many bytes of carried tiles (the flusher fell behind), a commit flushes
/// before it writes its slot, so a slot record stays small.
pub(crate) const PENDING_LIMIT: usize = 1 << 20;

impl Inner {
    /// Write a private file (no temp file: nothing reads it before the next sync).
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            self.ensure_dir(dir)?;
        }
        let mut f = File::create(path)?;
        f.write_all(bytes)
    }

    pub(crate) fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let _commit = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (found, old_edge, seq) = {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            (
                st.tree.unwrap_or_else(TreeState::empty),
                st.edge.clone(),
                st.seq,
            )
        };
        // Owned: the partial tiles move into the new edge below, uncopied (for a CT
        // log the partial bundle alone is up to ~300 KB).
        let CommitBatch { prev, next, tiles } = batch;
        if found != prev {
            return Err(StorageError::Conflict {
                expected: prev.size,
                found: found.size,
            });
        }
        // 1. Completed tiles and bundles to their staging paths (`syncfs` mode: the
        //    kernel writes them back meanwhile, so the flush's `syncfs` finds little to
        //    do). In `fsync` mode the flush writes them itself, from memory: the commit
        //    then waits for one file only, which on a network filesystem saves a
        //    create and a write round trip per completed tile.
        let (full, mut partial): (Vec<_>, Vec<_>) =
            tiles.into_iter().partition(|(id, _)| id.is_full());
        let staged_now = if self.sync == SyncMethod::Syncfs {
            &full[..]
        } else {
            &[]
        };
        for (id, bytes) in staged_now {
            let path = self.staged_path(id);
            self.write_private(&path, bytes).map_err(|e| {
                StorageError::from_io(format!("writing {}: {e}", path.display()), &e)
            })?;
        }
        // 2. The flusher fell far behind: catch up first, so a slot stays small.
        let pending_bytes: usize = (self.pending.lock().unwrap_or_else(|e| e.into_inner()))
            .iter()
            .map(|(_, b)| b.len())
            .sum();
        if pending_bytes > PENDING_LIMIT {
            self.flush()?;
        }
        // 3. The commit point: the new state, its edge and every full tile not yet
        //    durable at its public path (this batch's and those still pending) in the
        //    older slot, made durable by the slot's one `fdatasync` (invariants 2 and 3).
        //    A partial the batch did not change is the same tile as before.
        let mut edge = Vec::new();
        let kind = bundle_kind(
            full.iter()
                .chain(&partial)
                .chain(old_edge.iter())
                .map(|(id, _)| id),
        );
        for id in edge_ids(next.size, kind) {
            let bytes = match partial.iter().position(|(t, _)| *t == id) {
                Some(i) => partial.swap_remove(i).1,
                None => old_edge
                    .iter()
                    .find(|(t, _)| *t == id)
                    .map(|(_, b)| b.clone())
                    .ok_or_else(|| {
                        StorageError::Corrupt(format!(
                            "batch to size {} lacks {}",
                            next.size,
                            id.path()
                        ))
                    })?,
            };
            edge.push((id, bytes));
        }
        let seq = seq + 1;
        let slot = self.private.join(SLOTS[(seq % 2) as usize]);
        let still_pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let carried: Vec<(&TileId, &[u8])> = still_pending
            .iter()
            .map(|(id, b)| (id, &b[..]))
            .chain(full.iter().map(|(id, b)| (id, &b[..])))
            .collect();
        let record = encode_slot(&self.origin, seq, &next, &edge, &carried);
        // A failed write leaves this (older) slot torn and the newer one intact: the
        // next commit rewrites it. A failed sync poisons. Not under the sync lock: what
        // this commit needs durable is all in this one file, whose own error cursor
        // reports any failure of its pages, and a flush's `syncfs` must not delay it.
        // Opened anew each time (a round trip on a network filesystem), not held: a
        // slot file replaced or deleted under a running log must fail the commit, not
        // take it into an unlinked inode a restart never reads.
        let f = write_in_place(&slot, &record.pieces())
            .map_err(|e| StorageError::from_io(format!("writing {}: {e}", slot.display()), &e))?;
        // A failed sync leaves the outcome open: the record is written, and a restart
        // may find it on disk (the page cache may write it back yet), so the batch is
        // "uncertain", never "not logged".
        let synced = match self.fail_slot_sync.swap(false, Ordering::AcqRel) {
            true => Err(io::Error::from_raw_os_error(libc::EIO)),
            false => f.sync_data(),
        };
        synced.map_err(|e| {
            StorageError::Unsettled(format!(
                "{}; the batch to size {} may be logged",
                self.poison(e, &slot),
                next.size
            ))
        })?;
        // 4. Hand the completed tiles to the flusher (step 5); until then they are
        //    served from memory, from before the new state is visible.
        let completed = !full.is_empty();
        if completed {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.extend(full.into_iter().map(|(id, bytes)| (id, Arc::from(bytes))));
        }
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Committed {
            tree: Some(next),
            edge: Arc::new(edge),
            seq,
        };
        if completed {
            self.flusher
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .wanted = true;
            self.flusher.wake.notify_one();
        }
        // 6. Collect the partials of tiles a flush has made public since the last
        //    commit: the engine has acknowledged the commits that completed them and
        //    serves the full tiles, so a reader falling back from a partial always
        //    finds the full one. Not while the publisher writes partials (it may be
        //    writing into one of these directories): they wait for the next commit then.
        self.collect_partials();
        Ok(())
    }

    /// Delete the partial directories in [`Inner::gc`], unless the publisher is
    /// writing partials (see commit protocol step 6).
    fn collect_partials(&self) {
        let publishing = match self.publishing.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let collect = std::mem::take(&mut *self.gc.lock().unwrap_or_else(|e| e.into_inner()));
        if !collect.is_empty() {
            let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            for dir in collect {
                let _ = fs::remove_dir_all(&dir);
                dirs.remove(&dir);
            }
        }
        drop(publishing);
    }

    /// 5. Flush: make the pending tiles durable at their staging paths (one `syncfs`),
    ///    rename them to their public paths, and stop carrying them. The rename need not
    ///    be durable yet: a crash that loses it leaves the synced staged file, which the
    ///    next open renames (see [`recover`](crate::recovery::recover)).
    ///
    ///    Returns how many tiles it published.
    pub(crate) fn flush(&self) -> Result<usize, StorageError> {
        let _flush = self.flush_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.check_poisoned()?;
        if self.flushes_stopped.load(Ordering::Acquire) {
            return Err(StorageError::Backend("flushing was stopped".into()));
        }
        // Only commits append, and only flushes (serialized) remove from the front.
        let pending: Pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let tiles: Vec<TileId> = pending.iter().map(|(id, _)| *id).collect();
        if tiles.is_empty() {
            return Ok(0);
        }
        let staged: Vec<PathBuf> = tiles.iter().map(|id| self.staged_path(id)).collect();
        match self.sync {
            SyncMethod::Syncfs => self.sync_all_files()?,
            // Written here, not by the commit (step 1), and synced as written, several
            // files at once.
            SyncMethod::Fsync => {
                for path in &staged {
                    if let Some(dir) = path.parent() {
                        self.ensure_dir(dir).map_err(|e| {
                            StorageError::from_io(format!("creating {}: {e}", dir.display()), &e)
                        })?;
                    }
                }
                let files: Vec<(&Path, &[u8])> = staged
                    .iter()
                    .zip(&pending)
                    .map(|(path, (_, bytes))| (path.as_path(), &bytes[..]))
                    .collect();
                self.synced(|| sync::write_and_fsync_each(&files), &self.root)?;
            }
        }
        let mut dirs = DirSync::default();
        let mut partials = Vec::with_capacity(tiles.len());
        let mut failed = None;
        for (id, staged) in tiles.iter().zip(&staged) {
            let public = self.tile_path(id);
            let moved = public
                .parent()
                .map_or(Ok(()), |d| self.ensure_public_dir(d, &mut dirs))
                .and_then(|()| fs::rename(staged, &public))
                .or_else(|e| {
                    // Renamed by an earlier attempt whose error was a lie (NFS).
                    if e.kind() == io::ErrorKind::NotFound && public.exists() {
                        Ok(())
                    } else {
                        Err(e)
                    }
                });
            if let Err(e) = moved {
                // This tile and the ones after it stay staged and carried: the next
                // flush tries again, and until then no checkpoint names them. If it
                // never succeeds, commits are refused at [`PENDING_LIMIT`].
                failed = Some(StorageError::from_io(
                    format!("publishing {}: {e}", public.display()),
                    &e,
                ));
                break;
            }
            let mut p = public.into_os_string();
            p.push(".p");
            partials.push(PathBuf::from(p));
        }
        let published = partials.len();
        match self.sync {
            // The publisher's `syncfs` makes the renames durable before a checkpoint
            // names them; a crash before that leaves synced staged files (recovery).
            SyncMethod::Syncfs if published > 0 => {
                self.renamed_unsynced.store(true, Ordering::Release)
            }
            // The staged names were never synced: the renames must be durable before
            // the slots stop carrying these tiles (invariant 4).
            SyncMethod::Fsync => self.sync_dirs(dirs)?,
            SyncMethod::Syncfs => {}
        }
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..published);
        self.gc
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(partials);
        match failed {
            Some(e) => Err(e),
            None => Ok(published),
        }
    }

    /// The flusher thread: a flush whenever a commit handed over tiles, and one last
    /// one when the storage is dropped.
    pub(crate) fn run_flusher(&self) {
        loop {
            let stop = {
                let mut st = self.flusher.state.lock().unwrap_or_else(|e| e.into_inner());
                while !st.wanted && !st.stop {
                    st = self
                        .flusher
                        .wake
                        .wait(st)
                        .unwrap_or_else(|e| e.into_inner());
                }
                st.wanted = false;
                st.stop
            };
            if let Err(e) = self.flush() {
                tracing::warn!(error = %e, "flushing committed tiles failed; the state slots still carry them");
            }
            if stop {
                // No commit follows to collect what the last flushes made public.
                self.collect_partials();
                return;
            }
        }
    }
}
