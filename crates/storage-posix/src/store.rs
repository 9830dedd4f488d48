//! The open log's shared state ([`Inner`]) and what every path through it uses: the
//! private directory's layout, temp, staging and tile paths, public directories made
//! durable for the renames into them, and the sync lock with the poison that stops
//! commits after a failed sync (crate docs, "Sync failures stop commits"; invariant 7).

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tlogd_core::engine::{StorageError, TreeState};
use tlogd_core::tile::TileId;

use crate::slot::Committed;
use crate::sync::{self, SyncMethod, syncfs};

pub(crate) const PRIVATE_DIR: &str = ".tlogd";

/// Full tiles of a batch before its state commits (commit protocol step 1).
pub(crate) const STAGED_DIR: &str = "staged";

pub(crate) struct Inner {
    pub(crate) root: PathBuf,
    pub(crate) private: PathBuf,
    pub(crate) origin: String,
    /// Keeps the OFD lock: it is released when the last descriptor closes.
    pub(crate) _lock: File,
    /// Tessera's own locks (`flock`), held for as long as the log is open, when the
    /// directory was a Tessera log.
    pub(crate) _tessera_locks: Vec<File>,
    /// The Tessera tree state adopted at open.
    pub(crate) adopted: Option<TreeState>,
    /// The committed state and right edge, as on disk.
    pub(crate) state: Mutex<Committed>,
    /// Serializes commits (the engine commits one batch at a time anyway); `state` is
    /// only locked briefly, so reads never wait for a commit's I/O.
    pub(crate) commit_lock: Mutex<()>,
    /// Directories known to exist (saves a mkdir per tile).
    pub(crate) dirs: Mutex<HashSet<PathBuf>>,
    /// Partial-tile directories of tiles a flush made public. Deleted by the next
    /// commit, when the engine is sure to serve the full tiles.
    pub(crate) gc: Mutex<Vec<PathBuf>>,
    /// Held by the publisher while it writes a checkpoint's partial tiles; the
    /// collection of partial directories waits for a commit when it is free. (Without
    /// it a commit could delete the directory of a partial the publisher was about to
    /// write: the publish failed, and that checkpoint came a whole interval late.)
    pub(crate) publishing: Mutex<()>,
    pub(crate) tmp_seq: AtomicU64,
    /// Set after a failed sync: the page cache may then hold data the disk does not,
    /// so nothing more is committed until the daemon restarts and re-reads the disk.
    pub(crate) poisoned: AtomicBool,
    /// Serializes every `syncfs` and directory `fsync` with the poisoning of a failed
    /// one (a slot's `fdatasync` does not take it; see "Sync failures stop commits").
    pub(crate) sync_lock: Mutex<()>,
    /// The log root, open for `syncfs` for as long as the log is: its error cursor then
    /// reports every writeback error since the open, even one another process's sync
    /// already saw.
    pub(crate) root_dir: File,
    /// Committed full tiles whose public files are not yet known durable, oldest first:
    /// every slot written carries them (commit protocol step 3) until a flush makes them
    /// durable and removes them from the front.
    pub(crate) pending: Mutex<Pending>,
    /// Serializes flushes (the flusher thread, the publisher, a commit over
    /// [`PENDING_LIMIT`](crate::staging::PENDING_LIMIT)).
    pub(crate) flush_lock: Mutex<()>,
    /// Wakes the flusher thread.
    pub(crate) flusher: Flusher,
    /// A flush renamed tiles into place since the last `syncfs` began: the publisher
    /// syncs before its checkpoint names them.
    pub(crate) renamed_unsynced: AtomicBool,
    /// Set by [`PosixStorage::stop_flushing`] (tests): flushes fail, so committed tiles
    /// stay staged and carried, as a crash right after their commit leaves them.
    ///
    /// [`PosixStorage::stop_flushing`]: crate::PosixStorage::stop_flushing
    pub(crate) flushes_stopped: AtomicBool,
    /// Set by [`PosixStorage::fail_next_slot_sync`] (tests).
    ///
    /// [`PosixStorage::fail_next_slot_sync`]: crate::PosixStorage::fail_next_slot_sync
    pub(crate) fail_slot_sync: AtomicBool,
    /// How flushes, the publisher and recovery make files durable.
    pub(crate) sync: SyncMethod,
    /// Set by [`PosixStorage::skip_directory_syncs`] (tests).
    ///
    /// [`PosixStorage::skip_directory_syncs`]: crate::PosixStorage::skip_directory_syncs
    pub(crate) skip_dir_syncs: AtomicBool,
}

/// See [`Inner::pending`].
pub(crate) type Pending = Vec<(TileId, Arc<[u8]>)>;

/// Directories to `fsync` before renames into them are relied on (`fsync` mode), and
/// the new ones among them that are known durable once that is done.
#[derive(Default)]
pub(crate) struct DirSync {
    dirs: BTreeSet<PathBuf>,
    known_after: Vec<PathBuf>,
}

#[derive(Default)]
pub(crate) struct Flusher {
    pub(crate) state: Mutex<FlusherState>,
    pub(crate) wake: std::sync::Condvar,
}

#[derive(Default)]
pub(crate) struct FlusherState {
    pub(crate) wanted: bool,
    pub(crate) stop: bool,
}

impl Inner {
    pub(crate) fn tile_path(&self, id: &TileId) -> PathBuf {
        self.root.join(id.path())
    }

    pub(crate) fn temp_path(&self) -> PathBuf {
        let n = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        self.private.join("tmp").join(format!("t{n}"))
    }

    pub(crate) fn ensure_dir(&self, dir: &Path) -> io::Result<()> {
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if !dirs.contains(dir) {
            fs::create_dir_all(dir)?;
            dirs.insert(dir.to_path_buf());
        }
        Ok(())
    }

    /// [`Inner::ensure_dir`] for a public directory a tile is about to be renamed into,
    /// and the directories to fsync so that the rename survives a crash (`fsync` mode):
    /// `dir` itself, and the parent of every directory between the root and `dir` not
    /// known durable yet, which this call may have created. They are known durable
    /// only once [`Inner::sync_dirs`] has synced them: another flush or the publisher
    /// renaming into the same new directory meanwhile syncs the parents too.
    pub(crate) fn ensure_public_dir(&self, dir: &Path, sync: &mut DirSync) -> io::Result<()> {
        if self.sync == SyncMethod::Syncfs {
            // The flush's or the publisher's `syncfs` covers directory entries too.
            return self.ensure_dir(dir);
        }
        sync.dirs.insert(dir.to_path_buf());
        if self
            .dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(dir)
        {
            return Ok(());
        }
        fs::create_dir_all(dir)?;
        let known = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        let mut d = dir;
        while d != self.root && !known.contains(d) {
            let Some(parent) = d.parent() else { break };
            sync.dirs.insert(parent.to_path_buf());
            sync.known_after.push(d.to_path_buf());
            d = parent;
        }
        Ok(())
    }

    /// `fsync` the directories [`Inner::ensure_public_dir`] collected (`fsync` mode;
    /// nothing in `syncfs` mode, whose caller syncs the filesystem), several at once,
    /// under the sync lock; a failure poisons the store.
    pub(crate) fn sync_dirs(&self, sync: DirSync) -> Result<(), StorageError> {
        if self.sync == SyncMethod::Syncfs || sync.dirs.is_empty() {
            return Ok(());
        }
        if self.skip_dir_syncs.load(Ordering::Acquire) {
            return Ok(());
        }
        let dirs: Vec<PathBuf> = sync.dirs.into_iter().collect();
        self.synced(|| sync::fsync_each(&dirs), &self.root)?;
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sync.known_after);
        Ok(())
    }

    pub(crate) fn staged_path(&self, id: &TileId) -> PathBuf {
        self.private.join(STAGED_DIR).join(id.path())
    }

    /// `syncfs` the log's filesystem; see [`Inner::synced`].
    pub(crate) fn sync_all_files(&self) -> Result<(), StorageError> {
        self.synced(
            || {
                self.renamed_unsynced.store(false, Ordering::Release);
                self.syncfs()
            },
            &self.root,
        )
    }

    /// Run one sync under the sync lock; a failure poisons the store. Under the lock,
    /// a sync that follows a failed one always sees the poison, so no commit can pass
    /// its sync point after another path consumed the error report it needed.
    pub(crate) fn synced(
        &self,
        sync: impl FnOnce() -> io::Result<()>,
        what: &Path,
    ) -> Result<(), StorageError> {
        let _sync = self.sync_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.check_poisoned()?;
        sync().map_err(|e| StorageError::Backend(self.poison(e, what)))
    }

    fn syncfs(&self) -> io::Result<()> {
        syncfs(&self.root_dir)
    }

    pub(crate) fn check_poisoned(&self) -> Result<(), StorageError> {
        if self.poisoned.load(Ordering::Acquire) {
            // Refused at once (HTTP 503): retrying cannot help before a restart.
            return Err(StorageError::WritesRefused(
                "an earlier fsync failed; restart tlogd to re-read the log from disk".into(),
            ));
        }
        Ok(())
    }

    /// Poison the store after a failed sync of `what` (see [`Inner::synced`]); the
    /// error's message.
    pub(crate) fn poison(&self, e: io::Error, what: &Path) -> String {
        self.poisoned.store(true, Ordering::Release);
        tracing::error!(error = %e, path = %what.display(), "sync failed; no more commits until restart");
        format!(
            "sync of {}: {e}; restart tlogd to re-read the log from disk",
            what.display()
        )
    }
}
