//! POSIX filesystem storage for tlogd, the embedded default.
//!
//! The log root holds exactly the public tlog-tiles resources (`checkpoint`,
//! `tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]`), so any static web server can
//! serve it. Private state lives in `<root>/.tlogd/`, which is never served:
//!
//! * `state.0`, `state.1`: the committed tree state (origin, size, root), *its right
//!   edge* (the partial hash tile of every level and the partial entry bundle) and the
//!   full tiles not yet durable at their public paths, written
//!   alternately in place, each with a sequence number and a CRC-32C checksum: the
//!   commit point. The newer valid slot wins at open; a torn write of the slot being
//!   written leaves the other, the previous commit, intact. The record is written with
//!   one vectored write straight from the tiles in memory (no copy into one buffer),
//!   its checksum computed over the same pieces. A slot's record starts with
//!   its length and is overwritten in place; the file never shrinks and grows in steps
//!   of 64 KiB (`slot::SLOT_GROWTH`), so nearly every commit rewrites allocated blocks
//!   without changing the file's size. On ext4 and XFS its `fdatasync` then writes data
//!   only, with no journal commit for the inode (measured: 43.4k → 46.9k appends/s on
//!   journaled ext4); copy-on-write filesystems (btrfs, ZFS) allocate anew anyway.
//! * `lock`: held with an OFD (`fcntl`) write lock while a daemon has the log open
//!   (`flock` does not work over NFS; OFD locks do);
//! * `tmp/`: temporary files, renamed into place (same filesystem);
//! * `staged/`: full tiles and bundles of a batch, from their write until a flush after
//!   the commit of the state that carries them renames them into place (see the commit
//!   protocol).
//!
//! Beside the tree, the root also holds blobs ([`LogStorage::put_blob`]: CT's issuer
//! certificates at `issuer/<hex SHA-256>`), one file each at `<root>/<key>`. A blob is
//! written to a temp file in `tmp/` and synced, its new directories are created and
//! their parents synced, and it is hard-linked into place, which (unlike a rename)
//! never replaces a file already there: the link fails and the bytes are compared.
//! The directory is synced before the blob is reported stored, and a crash leaves
//! either no file at the key or the whole one (the temp is removed at the next open).
//!
//! Partial tiles are public files only for tree sizes a checkpoint names (tlog-tiles
//! "Partial Tiles": logs MUST serve those, and only those are ever fetched); between
//! checkpoints the edge lives in the state record and in memory. A batch thus creates
//! files only for the tiles it completes, instead of one per changed partial: file
//! creation was the largest cost of the commit path (profiled: ext4's inode allocator).
//!
//! # Adopting a Tessera log
//!
//! A directory written by Trillian Tessera's POSIX storage (v1) has the same public
//! layout (tlog-tiles) and keeps its private state in `.state/`: `treeState` (JSON
//! `{"size":N,"root":"<base64>"}`, the integrated tree), lock files and GC state. When
//! a directory has no tlogd state but has `.state/treeState`, [`PosixStorage::open`]
//! adopts it: it reads the tree state and the public edge tiles at that size (the
//! partial tile of every level and the partial bundle), refuses with an error naming
//! what disagrees unless the tiles hash to that root and the partial bundle to the
//! level-0 tile, and checks the public checkpoint (origin, and its root recomputed from
//! the tiles at its size). The log then continues from that state; the first commit
//! writes tlogd's own state. Tessera's files are never modified, and while tlogd has the
//! directory open it holds the `flock`s Tessera takes to integrate, publish and GC
//! (`.state/*.lock`), so a Tessera process started on it waits instead of forking the
//! log. (Tessera's Badger antispam index is not read: tlogd's dedup index is rebuilt
//! from the bundles.)
//!
//! # Commit protocol (see `tlogd_core::engine` for the engine's side)
//!
//! Steps 1 to 4 and 6 run in `Inner::commit`, step 5 in `Inner::flush` (both in
//! `staging`, numbered in the code where each happens); the slot record is `slot`'s.
//!
//! 1. Write every tile and bundle the batch completes (full ones) to its *staging*
//!    path, `.tlogd/staged/<tile path>`, never served. Nothing is synced, and nothing
//!    public changes: a crash here leaves the old state in force and only private
//!    leftovers. (`fsync` mode skips this step: the flush writes the staged files
//!    from memory, so a commit waits for one file only.)
//! 2. If the tiles still waiting for a flush (step 5) exceed 1 MiB
//!    (`staging::PENDING_LIMIT`), flush them now, so a slot record stays small when the
//!    flusher falls behind.
//! 3. Compare-and-swap the state: check the committed state is the batch's `prev` (we
//!    hold the only lock, so the in-memory copy is authoritative), then write into the
//!    older slot the new state, its edge, and *every full tile not yet durable at its
//!    public path* (this batch's and those still waiting for a flush), and
//!    `fdatasync` it. Committed: the slot alone holds all the batch's bytes, so one
//!    data-only sync of one file is the commit's only wait. (Before this format the
//!    staged tiles were made durable first by a `syncfs` of the whole filesystem,
//!    which cost three times the slot's sync and most of the commit.)
//! 4. Hand the completed tiles to the flusher thread; until step 5 reads are served
//!    from memory.
//! 5. Flush, in the background (also from the publisher, and from step 2): the staged
//!    files are made durable, then each is renamed to its public path and is no longer
//!    carried by the slots that follow. A public path thus only ever holds committed
//!    bytes (engine invariant 1), durable before they appear, and a static web server
//!    or CDN never caches a tile that a crash would later replace. How, by the log's
//!    [`SyncMethod`] (`storage.sync`; see the `sync` module for which filesystem gets
//!    which):
//!    * `syncfs`: one `syncfs` makes the staged files and their names durable; the
//!      renames need not be, since a crash that loses one leaves a synced staged file.
//!    * `fsync`: each staged file written and `fsync`ed, several at once; the renames;
//!      then an `fsync` of each directory renamed into (and of the parent of each new
//!      one), before the slots stop carrying the tiles, since the staged names were
//!      never synced. A crash that keeps a rename in the new directory only (faultfs can)
//!      leaves the staged name too, with synced bytes: recovery renames it again.
//! 6. Garbage-collect the partials of tiles a flush has made public (tlog-tiles
//!    "Partial Tiles": readers fall back to the full tile, which is served by then).
//!    Best effort, and not while the publisher is writing partials (it may be writing
//!    into one of those directories): then a later commit collects them.
//!
//! Overwriting a slot drops what it carried; that is safe by invariants 2 and 3 below.
//!
//! **Recovery** (`recovery::recover`, at open): the newest valid slot's carried tiles
//! are written to their public paths where those do not hold exactly their bytes, and
//! their staged files (never synced, so possibly torn) are deleted; any other staged
//! tile inside the committed tree was synced by a flush whose rename the crash lost,
//! and is renamed; staged tiles beyond the tree belong to a batch that never committed
//! and are deleted; then one `syncfs` (or an `fsync` of each file written and directory
//! renamed into, creating directories durably). A slot of a format before v4 (v3)
//! carries nothing, and its staged tiles were synced before its state was written, so
//! they are renamed. A slot of an earlier format (v4, v3, v2) is read as it is, and
//! once recovery is done both slots are rewritten in this release's (v5), so that an
//! earlier release refuses the log instead of falling back to an older commit in the
//! other slot.
//!
//! # Sync failures stop commits
//!
//! Linux reports a writeback error once per open file description, to the first
//! `fsync`/`syncfs` that asks (for `syncfs`, from Linux 5.8). Every `syncfs`, every
//! `fsync` of a flush's or the publisher's files, and every directory `fsync` runs
//! under one lock, and any failure poisons the store: no commit and no checkpoint until
//! a restart re-reads the disk. Otherwise the publisher's `syncfs` could consume an
//! error that belonged to a flush's tiles and let that flush publish them. `syncfs` goes
//! through a descriptor of the log root held open since open, so no error since then
//! is missed, even one another process's sync saw first. The slot's `fdatasync` does
//! not take the lock: all a commit needs durable is in that one file, whose own error
//! state reports any failure of its pages to that call; a failure poisons too.
//!
//! # Publishing
//!
//! Before the checkpoint for size S is written (temp, fsync, rename, directory fsync),
//! the partial tiles of S are written from the in-memory edge (a narrower partial is a
//! prefix of a wider one) to temp files made durable before any is renamed into
//! place, the committed full tiles are flushed (step 5), and one `syncfs` (or an
//! `fsync` of each directory renamed into) makes those renames durable, so a
//! checkpoint never names a tile that is not there. Positions completed since S are
//! skipped: their full tile is already served.
//!
//! # Invariants
//!
//! What the protocol keeps true at every instant, a crash at any point included; the
//! engine's invariants (`tlogd_core::engine`) rest on them. Comments in the code cite
//! them by number.
//!
//! 1. **One writer.** A process holds the OFD lock on `lock` (and, in an adopted
//!    Tessera directory, Tessera's own `flock`s) for as long as it has the log open, so
//!    the committed state it keeps in memory is the one on disk: step 3 compares
//!    against it without reading.
//! 2. **The newest valid slot is the committed state.** A commit writes only the older
//!    slot, so a torn write leaves the newer one, the previous commit, intact; a record
//!    counts only whole (its length and CRC-32C check out). Only the first commit can
//!    leave no valid slot behind: any other unreadable slot is refused at open, never
//!    started over, which would fork the log.
//! 3. **Every slot written carries every committed full tile not yet durable at its
//!    public path** (step 3). Overwriting a slot therefore drops nothing a crash could
//!    need, and the slot's one `fdatasync` is all a commit waits for.
//! 4. **A tile stops being carried only once it is durable outside the slots**: at its
//!    public path (`fsync`: rename and directory synced), or at its staging path with
//!    the rename possibly lost (`syncfs`: the staged files synced first). So at open a
//!    staged tile inside the committed tree that the newest slot does not carry holds
//!    synced bytes and is renamed; one beyond the tree is an uncommitted batch's and is
//!    deleted.
//! 5. **A public path only ever holds committed bytes, durable before they appear**
//!    (engine invariant 1): full tiles go public only by the flush's rename, after the
//!    state naming them committed (step 5); partials and the checkpoint only through
//!    temp files synced before the rename (Publishing).
//! 6. **A checkpoint names only tiles durable at their public paths** (engine invariant
//!    4): before it is written, the partials of its size are written, the committed full
//!    tiles flushed and every rename synced; a partial it names is collected only after
//!    its full tile went public (step 6).
//! 7. **After a failed sync nothing more is committed or published**, until a restart
//!    re-reads the disk ("Sync failures stop commits").
//! 8. **A slot file never shrinks, and grows before its record is written**: a commit
//!    that cannot grow it leaves the old record whole, so a commit reported failed is
//!    never read back as committed. Both slots exist from open on, so a commit creates
//!    no file and changes no directory.
//! 9. **A blob at its key is whole and never replaced**: it is linked from a synced
//!    temp file, and its directory synced before it is reported stored.
//!
//! # Where it happens
//!
//! * `slot`: the state slot record (v5, and the earlier formats it reads), its CRC-32C,
//!   its in-place vectored write, and loading the newest valid slot (invariants 2, 8).
//! * `staging`: the commit (steps 1 to 4 and 6) and the flush (step 5) with its thread
//!   (invariants 3 to 5).
//! * `publish`: partial tiles and the checkpoint (Publishing; invariant 6).
//! * `recovery`: what an open does to the disk: the crashed commit finished, the slots of
//!   an earlier release rewritten (invariant 4).
//! * `tessera`: adopting a Tessera log.
//! * `blob`: blobs (invariant 9).
//! * `store`: the open log's shared state and the sync lock and poison every path
//!   goes through (invariant 7); `edge`: which partial tiles a tree has; `sync`: the sync
//!   methods; `error`: why an open failed.
//! * This file: the crate's public types, the open sequence (invariant 1) and the
//!   [`LogStorage`] implementation, which hands blocking work to those modules.

mod blob;
mod edge;
mod error;
mod publish;
mod recovery;
mod slot;
mod staging;
mod store;
mod sync;
mod tessera;

pub use error::OpenError;
pub use sync::{Filesystem, SyncMethod, SyncMode};

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tlogd_core::engine::{CommitBatch, LogStorage, StorageError, TreeState, check_blob_key};
use tlogd_core::tile::TileId;

use crate::edge::edge_prefix;
use crate::error::io_err;
use crate::recovery::{create_dirs_durably, recover, upgrade_slots};
use crate::slot::{LoadError, SLOTS, SlotFormat, load_committed};
use crate::store::{Flusher, Inner, PRIVATE_DIR};
use crate::sync::syncfs_reports_errors;
use crate::tessera::{TESSERA_TREE_STATE, adopt_tessera, lock_tessera};

/// How a [`PosixStorage`] is opened.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct PosixOptions {
    /// How files are made durable (config `storage.sync`; see [`SyncMode`]).
    pub sync: SyncMode,
}

impl PosixOptions {
    /// Options with `sync` as the sync mode.
    pub fn with_sync(sync: SyncMode) -> Self {
        PosixOptions { sync }
    }
}

/// A tlog-tiles log in a directory.
pub struct PosixStorage {
    inner: Arc<Inner>,
    /// The thread that flushes committed tiles to their public paths (commit protocol
    /// step 5); stopped and joined on drop, after one last flush.
    flusher: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PosixStorage {
    fn drop(&mut self) {
        {
            let mut st = self
                .inner
                .flusher
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            st.stop = true;
        }
        self.inner.flusher.wake.notify_one();
        if let Some(t) = self.flusher.take() {
            let _ = t.join();
        }
    }
}

impl PosixStorage {
    /// Act as a publisher in the middle of writing a checkpoint's partial tiles until
    /// the guard is dropped: commits go on, but collect no partial directory. For
    /// tests of that interleaving, which is otherwise a matter of timing.
    #[doc(hidden)]
    pub fn hold_publishing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner
            .publishing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Make every later flush fail, as if the process had died right after each commit:
    /// committed tiles stay staged and carried in the state slots. For tests of the
    /// recovery at open.
    #[doc(hidden)]
    pub fn stop_flushing(&self) {
        self.inner.flushes_stopped.store(true, Ordering::Release);
    }

    /// Make the next commit's state-slot `fdatasync` report `EIO` after the slot was
    /// written, as a failing disk's would: the record is in the page cache and may yet
    /// reach the disk. For tests of that outcome.
    #[doc(hidden)]
    pub fn fail_next_slot_sync(&self) {
        self.inner.fail_slot_sync.store(true, Ordering::Release);
    }

    /// Make every later flush and publish skip its directory `fsync`s (`fsync` mode),
    /// as a build with that one sync left out would: the tiles' renames are then not
    /// durable when the slots stop carrying them. For the test that the power-cut
    /// tests catch a missing sync (issue #36, "its own teeth").
    #[doc(hidden)]
    pub fn skip_directory_syncs(&self) {
        self.inner.skip_dir_syncs.store(true, Ordering::Release);
    }

    /// Open (or create) the log `origin` at `root`, taking its lock, with the default
    /// options ([`SyncMode::Auto`]).
    pub fn open(root: impl Into<PathBuf>, origin: &str) -> Result<Self, OpenError> {
        Self::open_with(root, origin, &PosixOptions::default())
    }

    /// The sync method this log uses (its [`PosixOptions::sync`] resolved for its
    /// filesystem).
    pub fn sync_method(&self) -> SyncMethod {
        self.inner.sync
    }

    /// Open (or create) the log `origin` at `root`, taking its lock.
    pub fn open_with(
        root: impl Into<PathBuf>,
        origin: &str,
        options: &PosixOptions,
    ) -> Result<Self, OpenError> {
        let root: PathBuf = root.into();
        let private = root.join(PRIVATE_DIR);
        create_dirs_durably(&private.join("tmp"))?;
        let lock_path = private.join("lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        if syncfs_reports_errors() == Some(false) {
            tracing::warn!(
                "this kernel's syncfs does not report write errors (Linux 5.8 and later do): a \
                 disk error while flushing completed tiles goes unnoticed until a reader or \
                 `tlogd verify` finds a bad tile"
            );
        }
        ofd_lock(&lock).map_err(|e| {
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                OpenError::Locked(root.clone(), lock_path.clone())
            } else {
                OpenError::Io(lock_path.clone(), e)
            }
        })?;
        // Leftovers of a crash: never renamed, never committed.
        let tmp = private.join("tmp");
        for f in fs::read_dir(&tmp).map_err(io_err(&tmp))?.flatten() {
            let _ = fs::remove_file(f.path());
        }
        let tessera_locks = lock_tessera(&root)?;
        let (mut committed, carried, format) =
            load_committed(&private, origin).map_err(|e| match e {
                LoadError::Io(p, e) => OpenError::Io(p, e),
                LoadError::Corrupt(p, m) => OpenError::CorruptState(p, m),
                LoadError::Origin(found) => OpenError::OriginMismatch {
                    dir: root.clone(),
                    expected: origin.to_string(),
                    found,
                },
            })?;
        let mut adopted = None;
        if committed.tree.is_none() && root.join(TESSERA_TREE_STATE).exists() {
            committed = adopt_tessera(&root, origin)?;
            adopted = committed.tree;
        }
        let size = committed.tree.map_or(0, |t| t.size);
        let root_dir = File::open(&root).map_err(io_err(&root))?;
        let (sync, fs) = options.sync.resolve(&root_dir).map_err(io_err(&root))?;
        let (dir, filesystem) = (root.display(), &fs.name);
        let mode = options.sync;
        if mode == SyncMode::Syncfs && !fs.syncfs_commits {
            tracing::warn!(
                %dir, filesystem, ?mode, method = %sync,
                "storage.sync = syncfs on a filesystem where syncfs is not known to commit \
                 (FUSE never sees it): a power cut may lose acknowledged entries; use \
                 \"auto\" or \"fsync\""
            );
        } else if mode == SyncMode::Auto && sync == SyncMethod::Fsync {
            tracing::info!(
                %dir, filesystem, ?mode, method = %sync,
                "storage.sync: syncfs is not known to commit this filesystem, so every file \
                 and directory written is fsynced"
            );
        } else {
            tracing::info!(%dir, filesystem, ?mode, method = %sync, "storage.sync");
        }
        recover(
            &root,
            &root_dir,
            sync,
            &private,
            size,
            carried.as_deref().unwrap_or_default(),
        )?;
        // Both slots exist from now on, so a commit never creates a file whose
        // directory entry would need its own fsync.
        let mut created = false;
        for name in SLOTS {
            let path = private.join(name);
            if !path.exists() {
                File::create(&path).map_err(io_err(&path))?;
                created = true;
            }
        }
        if created {
            File::open(&private)
                .and_then(|d| d.sync_all())
                .map_err(io_err(&private))?;
        }
        // After `recover`: the tiles a v4 slot carried are durable at their public
        // paths by now, so the rewritten slots need not carry them.
        if format.is_some_and(|f| f != SlotFormat::V5) && committed.seq > 0 {
            upgrade_slots(&private, origin, &mut committed)?;
        }
        let inner = Arc::new(Inner {
            root,
            private,
            origin: origin.to_string(),
            _lock: lock,
            _tessera_locks: tessera_locks,
            adopted,
            state: Mutex::new(committed),
            commit_lock: Mutex::new(()),
            dirs: Mutex::new(HashSet::new()),
            gc: Mutex::new(Vec::new()),
            publishing: Mutex::new(()),
            tmp_seq: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            fail_slot_sync: AtomicBool::new(false),
            sync_lock: Mutex::new(()),
            root_dir,
            pending: Mutex::new(Vec::new()),
            flush_lock: Mutex::new(()),
            flusher: Flusher::default(),
            renamed_unsynced: AtomicBool::new(false),
            flushes_stopped: AtomicBool::new(false),
            sync,
            skip_dir_syncs: AtomicBool::new(false),
        });
        let flusher = std::thread::Builder::new()
            .name("tlogd-posix-flush".into())
            .spawn({
                let inner = inner.clone();
                move || inner.run_flusher()
            })
            .map_err(|e| OpenError::Io(inner.private.clone(), e))?;
        Ok(PosixStorage {
            inner,
            flusher: Some(flusher),
        })
    }

    /// The log root (what a static web server would serve).
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The private state directory (`<root>/.tlogd`), e.g. for the dedup index.
    pub fn private_dir(&self) -> &Path {
        &self.inner.private
    }

    /// When this open adopted a Tessera log (no tlogd state yet, see the module docs):
    /// the tree state it continues.
    pub fn adopted_tessera(&self) -> Option<TreeState> {
        self.inner.adopted
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StorageError::Backend(format!("storage task failed: {e}")))?
    }
}

fn ofd_lock(f: &File) -> io::Result<()> {
    // SAFETY: zeroed flock is a valid value; fcntl only reads it.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    // SAFETY: valid fd and pointer to an initialised flock.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A file's bytes, or `None` if it does not exist.
async fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    match tokio::fs::read(path).await {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::Backend(format!(
            "reading {}: {e}",
            path.display()
        ))),
    }
}

impl LogStorage for PosixStorage {
    fn backend_name(&self) -> &'static str {
        "posix"
    }

    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        Ok(self
            .inner
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tree)
    }

    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        self.blocking(move |inner| inner.commit(batch)).await
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        if !id.is_full() {
            let edge = self
                .inner
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .edge
                .clone();
            if let Some(bytes) = edge_prefix(&edge, id) {
                return Ok(Some(bytes));
            }
        } else {
            // Committed, not yet flushed to its public path.
            let pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, bytes)) = pending.iter().find(|(t, _)| t == id) {
                return Ok(Some(bytes.to_vec()));
            }
        }
        read_optional(&self.inner.tile_path(id)).await
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        let size = tlogd_core::checkpoint::signed_size(signed)
            .ok_or_else(|| StorageError::Backend("not a signed checkpoint".into()))?;
        let signed = signed.to_vec();
        self.blocking(move |inner| inner.publish(size, &signed))
            .await
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        read_optional(&self.inner.root.join("checkpoint")).await
    }

    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        _content_type: &'static str,
    ) -> Result<(), StorageError> {
        check_blob_key(key)?;
        let (key, bytes) = (key.to_string(), bytes.to_vec());
        self.blocking(move |inner| inner.put_blob(&key, &bytes))
            .await
    }

    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        check_blob_key(key)?;
        read_optional(&self.inner.root.join(key)).await
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        self.blocking(|inner| {
            inner.check_poisoned()?;
            let path = inner.temp_path();
            let r = File::create(&path).and_then(|mut f| f.write_all(b"probe"));
            let _ = fs::remove_file(&path);
            r.map_err(|e| {
                StorageError::Backend(format!("{} is not writable: {e}", inner.private.display()))
            })
        })
        .await
    }
}
