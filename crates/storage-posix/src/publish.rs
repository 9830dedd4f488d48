//! The publisher: a checkpoint's partial tiles written from the committed edge, the
//! committed full tiles flushed, every rename made durable, and only then the checkpoint
//! (crate docs, "Publishing"; invariants 5 and 6).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use tlogd_core::engine::StorageError;

use crate::edge::{bundle_kind, edge_ids, edge_prefix};
use crate::store::{DirSync, Inner};
use crate::sync::{self, SyncMethod};

impl Inner {
    /// Temp file, fsync, rename, fsync the directory. A failed sync poisons the store.
    fn put_durable(&self, path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
        let tmp = self.temp_path();
        let failed = |what: &str, e: io::Error| {
            StorageError::from_io(format!("{what} {}: {e}", path.display()), &e)
        };
        let mut f = File::create(&tmp).map_err(|e| failed("writing", e))?;
        if let Err(e) = f.write_all(bytes) {
            let _ = fs::remove_file(&tmp);
            return Err(failed("writing", e));
        }
        self.synced(|| f.sync_all(), path)?;
        drop(f);
        fs::rename(&tmp, path).map_err(|e| failed("renaming", e))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let d = File::open(dir).map_err(|e| failed("opening the directory of", e))?;
        self.synced(|| d.sync_all(), dir)
    }

    /// Write the partial tiles of a checkpoint of `size`, then the checkpoint.
    pub(crate) fn publish(&self, size: u64, signed: &[u8]) -> Result<(), StorageError> {
        self.check_poisoned()?;
        // The checkpoint only ever moves forward (engine invariant 1), whoever asks.
        let path = self.root.join("checkpoint");
        if let Ok(old) = fs::read(&path)
            && tlogd_core::checkpoint::signed_size(&old).is_some_and(|s| s > size)
        {
            return Ok(());
        }
        // Until the partials are durable, no commit deletes a partial directory. The
        // edge is read under it: a tile still partial in it keeps its directory.
        let publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
        let edge = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .edge
            .clone();
        // Temp files first, synced before any is renamed over a public path, so a
        // crash never leaves a torn partial where a checkpoint names one.
        let mut partials = Vec::new();
        for id in edge_ids(size, bundle_kind(edge.iter().map(|(id, _)| id))) {
            // Not in the edge: the position was completed since, and its full tile is
            // what readers fall back to.
            if let Some(bytes) = edge_prefix(&edge, &id) {
                partials.push((self.temp_path(), self.tile_path(&id), bytes));
            }
        }
        if !partials.is_empty() {
            let written = match self.sync {
                SyncMethod::Syncfs => partials
                    .iter()
                    .try_for_each(|(tmp, path, bytes)| {
                        File::create(tmp)
                            .and_then(|mut f| f.write_all(bytes))
                            .map_err(|e| {
                                StorageError::from_io(
                                    format!("writing {}: {e}", path.display()),
                                    &e,
                                )
                            })
                    })
                    .and_then(|()| self.sync_all_files()),
                SyncMethod::Fsync => {
                    let files: Vec<(&Path, &[u8])> = partials
                        .iter()
                        .map(|(tmp, _, bytes)| (tmp.as_path(), &bytes[..]))
                        .collect();
                    self.synced(|| sync::write_and_fsync_each(&files), &self.root)
                }
            };
            if let Err(e) = written {
                for (tmp, _, _) in &partials {
                    let _ = fs::remove_file(tmp);
                }
                return Err(e);
            }
            let mut dirs = DirSync::default();
            for (tmp, path, _) in &partials {
                path.parent()
                    .map_or(Ok(()), |d| self.ensure_public_dir(d, &mut dirs))
                    .and_then(|()| fs::rename(tmp, path))
                    .map_err(|e| {
                        StorageError::from_io(format!("writing {}: {e}", path.display()), &e)
                    })?;
            }
            match self.sync {
                SyncMethod::Syncfs => self.renamed_unsynced.store(true, Ordering::Release),
                SyncMethod::Fsync => self.sync_dirs(dirs)?,
            }
        }
        // The full tiles of the checkpoint's tree go public too, and every rename
        // becomes durable before the checkpoint names it.
        self.flush()?;
        if self.renamed_unsynced.load(Ordering::Acquire) {
            self.sync_all_files()?;
        }
        drop(publishing);
        self.put_durable(&path, signed)
    }
}
