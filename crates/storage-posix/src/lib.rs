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
//!   of [`SLOT_GROWTH`], so nearly every commit rewrites allocated blocks without
//!   changing the file's size. On ext4 and XFS its `fdatasync` then writes data only,
//!   with no journal commit for the inode (measured: 43.4k → 46.9k appends/s on
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
//! 1. Write every tile and bundle the batch completes (full ones) to its *staging*
//!    path, `.tlogd/staged/<tile path>`, never served. Nothing is synced, and nothing
//!    public changes: a crash here leaves the old state in force and only private
//!    leftovers. (`fsync` mode skips this step: the flush writes the staged files
//!    from memory, so a commit waits for one file only.)
//! 2. If the tiles still waiting for a flush (step 5) exceed [`PENDING_LIMIT`], flush
//!    them now, so a slot record stays small when the flusher falls behind.
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
//! Overwriting a slot drops what it carried; that is safe because the slot written
//! carries every tile not flushed yet, and a torn write leaves the other slot, which
//! carries every tile not flushed when it was written.
//!
//! **Recovery** ([`recover`], at open): the newest valid slot's carried tiles are
//! written to their public paths where those do not hold exactly their bytes, and their
//! staged files (never synced, so possibly torn) are deleted; any other staged tile
//! inside the committed tree was synced by a flush whose rename the crash lost, and is
//! renamed; staged tiles beyond the tree belong to a batch that never committed and are
//! deleted; then one `syncfs` (or an `fsync` of each file written and directory
//! renamed into, creating directories durably). A slot of a format before v4 (v3)
//! carries nothing, and
//! its staged tiles were synced before its state was written, so they are renamed. A
//! slot of an earlier format (v4, v3, v2) is read as it is, and once recovery is done
//! both slots are rewritten in this release's (v5), so that an earlier release refuses
//! the log instead of falling back to an older commit in the other slot.
//!
//! # Sync failures stop commits
//!
//! Linux reports a writeback error once per open file description, to the first
//! `fsync`/`syncfs` that asks (for `syncfs`, from Linux 5.8). Every `syncfs`, every
//! `fsync` of a flush's or the publisher's files, and every directory `fsync` runs
//! under one lock, and
//! any failure poisons the store: no commit and no checkpoint until a restart re-reads
//! the disk. Otherwise the publisher's `syncfs` could consume an error that belonged to
//! a flush's tiles and let that flush publish them. `syncfs` goes through a descriptor
//! of the log root held open since open, so no error since then is missed, even one
//! another process's sync saw first. The slot's `fdatasync` does not take the lock: all
//! a commit needs durable is in that one file, whose own error state reports any
//! failure of its pages to that call; a failure poisons too.
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

mod sync;

pub use sync::{Filesystem, SyncMethod, SyncMode};

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tlogd_core::engine::{CommitBatch, LogStorage, StorageError, TreeState, check_blob_key};
use tlogd_core::tile::{self, TileId, TileKind};

const PRIVATE_DIR: &str = ".tlogd";
/// The state file of the first release (state only; the edge was in partial files).
const STATE_MAGIC_V1: &str = "tlogd-posix-state v1";
/// The first bytes of a state slot in this release's format, v5: the fields of a v4
/// record with a CRC-32C instead of a SHA-256 as its checksum. A record is followed by
/// its length and may have stale bytes after it, and carries the full tiles not yet
/// durable at their public paths (commit protocol). The new magic is what makes an
/// earlier release refuse the record ("bad magic") instead of misreading it.
const SLOT_MAGIC: &[u8] = b"tlogd-posix-state v5\n";
/// The checksum ending a v5 record: its CRC-32C (Castagnoli), big-endian.
///
/// The checksum only has to catch a torn or partly stale record (a write the crash
/// interrupted over the record of two commits ago), not an adversary: whoever can
/// write the slot can rewrite any checksum. That is what ext4's journal (`jbd2`
/// checksum v3), PostgreSQL's WAL and RocksDB's WAL records use CRC-32C for.
/// A SHA-256 of the record, as v4 had, was the largest single CPU cost of a commit
/// (profiled with 1.2 KB CT entries: a fifth of the engine thread): the record carries
/// the partial entry bundle (up to 255 entries, ~300 KB for a CT log) and every tile
/// not flushed yet, hashed at ~1.8 GB/s, where the CRC runs at tens of GB/s
/// (PCLMULQDQ, `crc-fast`; measured 52 GB/s over a record's pieces, CRC-32 by
/// `crc32fast` 43 GB/s).
const SLOT_CRC_LEN: usize = 4;
/// The flags byte ending a v4 or v5 record of a frozen tree ([`TreeState::frozen`]).
const SLOT_FROZEN: u8 = 1;
/// A slot record's level byte for an entry bundle (hash tiles use their level,
/// 0..=63).
const SLOT_ENTRIES: u8 = u8::MAX;
/// A slot record's level byte for a static-ct-api data tile.
const SLOT_DATA: u8 = u8::MAX - 1;
/// The previous release's slot: a v5 record with a SHA-256 (32 bytes) as its
/// checksum. Read, never written: the slots are rewritten as v5 at open.
const SLOT_MAGIC_V4: &[u8] = b"tlogd-posix-state v4\n";
/// An earlier release's slot: a v4 record without carried tiles. Read, never
/// written; its full tiles were synced before its state was written.
const SLOT_MAGIC_V3: &[u8] = b"tlogd-posix-state v3\n";
/// The first bytes of a state slot of an earlier release: the record is the whole
/// file. Read, never written.
const SLOT_MAGIC_V2: &[u8] = b"tlogd-posix-state v2\n";
/// A slot file grows to a multiple of this (zeros after the record), so that the edge
/// growing from one commit to the next rarely changes the file's size.
const SLOT_GROWTH: usize = 64 << 10;
const SLOTS: [&str; 2] = ["state.0", "state.1"];
/// Full tiles of a batch before its state commits (commit protocol step 1).
const STAGED_DIR: &str = "staged";

/// Full tiles a state slot carries: committed, public file not yet known durable.
/// `None` for a slot of an earlier format, which carries none.
type Carried = Option<Vec<(TileId, Vec<u8>)>>;

/// Commit protocol, finished at open after a crash (module docs, "Recovery"): the
/// newest slot's carried tiles are written to their public paths where those do not
/// already hold exactly their bytes, and their staged files (synced only by a flush,
/// so possibly torn) are deleted; any other staged tile inside the committed tree of
/// `size` was synced by a flush whose rename the crash lost, and goes to its public
/// path; staged tiles beyond the tree are an uncommitted batch's and are deleted. One
/// `syncfs` then makes it all durable, before anything is served or committed.
fn recover(
    root: &Path,
    root_dir: &File,
    sync: SyncMethod,
    private: &Path,
    size: u64,
    carried: &[(TileId, Vec<u8>)],
) -> Result<(), OpenError> {
    let staged = private.join(STAGED_DIR);
    let carried_ids: HashSet<TileId> = carried.iter().map(|(id, _)| *id).collect();
    let mut changed = 0u64;
    // Directories a tile was renamed into: synced at the end (`fsync` mode).
    let mut renamed_into = BTreeSet::new();
    let mut stack = vec![staged.clone()];
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(OpenError::Io(dir, e)),
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&staged).unwrap_or(&path);
            let id = rel
                .to_str()
                .and_then(|r| TileId::parse(r).ok())
                .filter(|id| id.is_full());
            let synced_and_committed = id
                .filter(|id| tile_end(id) <= size && !carried_ids.contains(id))
                .is_some();
            if synced_and_committed {
                let public = root.join(rel);
                if let Some(parent) = public.parent() {
                    create_dirs_durably(parent)?;
                    renamed_into.insert(parent.to_path_buf());
                }
                fs::rename(&path, &public).map_err(io_err(&public))?;
                changed += 1;
            } else {
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
    }
    // Written to temp files and synced before any is renamed: a crash in the middle
    // must not leave a torn file at a public path either.
    let mut renames = Vec::new();
    for (i, (id, bytes)) in carried.iter().enumerate() {
        let public = root.join(id.path());
        match fs::read(&public) {
            Ok(b) if b == *bytes => continue,
            Ok(_) => tracing::warn!(
                path = %public.display(),
                "a public tile differs from the committed one the state carries; replacing it"
            ),
            Err(_) => {}
        }
        if let Some(parent) = public.parent() {
            create_dirs_durably(parent)?;
            renamed_into.insert(parent.to_path_buf());
        }
        let tmp = private.join("tmp").join(format!("recovered-{i}"));
        fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
        renames.push((tmp, public));
    }
    let temps: Vec<PathBuf> = renames.iter().map(|(t, _)| t.clone()).collect();
    if !renames.is_empty() {
        sync_paths(sync, root_dir, &temps).map_err(io_err(root))?;
    }
    for (tmp, public) in &renames {
        fs::rename(tmp, public).map_err(io_err(public))?;
    }
    changed += renames.len() as u64;
    if changed > 0 || !carried.is_empty() {
        // With their ancestors: a directory a killed process created may exist without
        // being durable (`fsync` mode syncs each new directory's parent only once it
        // has renamed into it).
        let mut dirs = BTreeSet::new();
        for d in renamed_into {
            dirs.extend(
                d.ancestors()
                    .take_while(|a| a.starts_with(root))
                    .map(Path::to_path_buf),
            );
        }
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        sync_paths(sync, root_dir, &dirs).map_err(io_err(root))?;
    }
    if changed > 0 {
        tracing::warn!(
            tiles = changed,
            "published the committed tiles a crash left unpublished"
        );
    }
    Ok(())
}

/// `fs::create_dir_all(dir)`, and then the entry of every directory it created made
/// durable by an fsync of its parent: a new log directory (and its `.tlogd`) whose
/// name a power cut loses takes the whole log with it. Found by `benches/power-cuts.sh`
/// on faultfs, which keeps a new name only once its directory is fsynced, as POSIX
/// promises (ext4 in its default mode happens to commit it within seconds).
fn create_dirs_durably(dir: &Path) -> Result<(), OpenError> {
    let mut created = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        created.push(d.to_path_buf());
        at = d.parent();
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    for d in &created {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(parent)
            .and_then(|f| f.sync_all())
            .map_err(io_err(parent))?;
    }
    Ok(())
}

/// Whether the running kernel's `syncfs` reports writeback errors, as Linux does from
/// 5.8 (module docs, "Sync failures stop commits"); `None` if its release is unreadable.
fn syncfs_reports_errors() -> Option<bool> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    release_at_least(&release, (5, 8))
}

/// Whether a kernel release string ("4.18.0-553.el8_10.x86_64") is at least `want`
/// (major, minor).
fn release_at_least(release: &str, want: (u32, u32)) -> Option<bool> {
    let mut numbers = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = numbers.next()?.parse::<u32>().ok()?;
    let minor = numbers.next()?.parse::<u32>().ok()?;
    Some((major, minor) >= want)
}

/// Make `paths` (files written, or directories changed) durable by `sync`: one
/// `syncfs` of the filesystem of `root_dir`, or an `fsync` of each.
fn sync_paths(sync: SyncMethod, root_dir: &File, paths: &[PathBuf]) -> io::Result<()> {
    match sync {
        SyncMethod::Syncfs => syncfs(root_dir),
        SyncMethod::Fsync => sync::fsync_each(paths),
    }
}

/// `syncfs(2)` of the filesystem holding `dir`.
fn syncfs(dir: &File) -> io::Result<()> {
    // SAFETY: valid fd.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The tree size at which a full tile is complete.
fn tile_end(id: &TileId) -> u64 {
    id.full().min_tree_size()
}

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

/// Why the log directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process holds the log's lock.
    #[error("log directory {0} is in use by another tlogd process (lock on {1} is held)")]
    Locked(PathBuf, PathBuf),
    /// The directory holds a log with another origin.
    #[error("log directory {dir} holds the log {found:?}, not {expected:?}")]
    OriginMismatch {
        /// The log root.
        dir: PathBuf,
        /// The origin configured.
        expected: String,
        /// The origin on disk.
        found: String,
    },
    /// The state file is unreadable.
    #[error("corrupt state file {0}: {1}")]
    CorruptState(PathBuf, String),
    /// Filesystem error.
    #[error("{0}: {1}")]
    Io(PathBuf, io::Error),
    /// A Tessera log's state and public files disagree, or cannot be read: it is not
    /// adopted.
    #[error("refusing to adopt the Tessera log in {0}: {1}")]
    Tessera(PathBuf, String),
    /// A Tessera process holds one of the directory's Tessera locks.
    #[error("log directory {0} is in use by a Tessera process (lock on {1} is held)")]
    TesseraLocked(PathBuf, PathBuf),
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

struct Inner {
    root: PathBuf,
    private: PathBuf,
    origin: String,
    /// Keeps the OFD lock: it is released when the last descriptor closes.
    _lock: File,
    /// Tessera's own locks (`flock`), held for as long as the log is open, when the
    /// directory was a Tessera log.
    _tessera_locks: Vec<File>,
    /// The Tessera tree state adopted at open.
    adopted: Option<TreeState>,
    /// The committed state and right edge, as on disk.
    state: Mutex<Committed>,
    /// Serializes commits (the engine commits one batch at a time anyway); `state` is
    /// only locked briefly, so reads never wait for a commit's I/O.
    commit_lock: Mutex<()>,
    /// Directories known to exist (saves a mkdir per tile).
    dirs: Mutex<HashSet<PathBuf>>,
    /// Partial-tile directories of tiles a flush made public. Deleted by the next
    /// commit, when the engine is sure to serve the full tiles.
    gc: Mutex<Vec<PathBuf>>,
    /// Held by the publisher while it writes a checkpoint's partial tiles; the
    /// collection of partial directories waits for a commit when it is free. (Without
    /// it a commit could delete the directory of a partial the publisher was about to
    /// write: the publish failed, and that checkpoint came a whole interval late.)
    publishing: Mutex<()>,
    tmp_seq: AtomicU64,
    /// Set after a failed sync: the page cache may then hold data the disk does not,
    /// so nothing more is committed until the daemon restarts and re-reads the disk.
    poisoned: AtomicBool,
    /// Serializes every `syncfs` and directory `fsync` with the poisoning of a failed
    /// one (a slot's `fdatasync` does not take it; see "Sync failures stop commits").
    sync_lock: Mutex<()>,
    /// The log root, open for `syncfs` for as long as the log is: its error cursor then
    /// reports every writeback error since the open, even one another process's sync
    /// already saw.
    root_dir: File,
    /// Committed full tiles whose public files are not yet known durable, oldest first:
    /// every slot written carries them (commit protocol step 3) until a flush makes them
    /// durable and removes them from the front.
    pending: Mutex<Pending>,
    /// Serializes flushes (the flusher thread, the publisher, a commit over
    /// [`PENDING_LIMIT`]).
    flush_lock: Mutex<()>,
    /// Wakes the flusher thread.
    flusher: Flusher,
    /// A flush renamed tiles into place since the last `syncfs` began: the publisher
    /// syncs before its checkpoint names them.
    renamed_unsynced: AtomicBool,
    /// Set by [`PosixStorage::stop_flushing`] (tests): flushes fail, so committed tiles
    /// stay staged and carried, as a crash right after their commit leaves them.
    flushes_stopped: AtomicBool,
    /// Set by [`PosixStorage::fail_next_slot_sync`] (tests).
    fail_slot_sync: AtomicBool,
    /// How flushes, the publisher and recovery make files durable.
    sync: SyncMethod,
    /// Set by [`PosixStorage::skip_directory_syncs`] (tests).
    skip_dir_syncs: AtomicBool,
}

/// See [`Inner::pending`].
type Pending = Vec<(TileId, Arc<[u8]>)>;

/// Directories to `fsync` before renames into them are relied on (`fsync` mode), and
/// the new ones among them that are known durable once that is done.
#[derive(Default)]
struct DirSync {
    dirs: BTreeSet<PathBuf>,
    known_after: Vec<PathBuf>,
}

/// Above this many bytes of carried tiles (the flusher fell behind), a commit flushes
/// before it writes its slot, so a slot record stays small.
const PENDING_LIMIT: usize = 1 << 20;

#[derive(Default)]
struct Flusher {
    state: Mutex<FlusherState>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct FlusherState {
    wanted: bool,
    stop: bool,
}

/// The committed state, its right edge and where the next commit goes.
struct Committed {
    /// `None` for a log never written.
    tree: Option<TreeState>,
    /// The partial tiles of the committed tree: at most one per level, and the bundle.
    edge: Arc<Vec<(TileId, Vec<u8>)>>,
    /// Sequence number of the newest valid slot (0: none written yet).
    seq: u64,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |e| OpenError::Io(path.to_path_buf(), e)
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

/// Rewrite both slots of a log last committed by an earlier release in this release's
/// format, holding the committed state: a downgraded binary then refuses the log
/// (it reads neither slot) instead of falling back to an older commit in the slot the
/// first new commit did not overwrite.
fn upgrade_slots(private: &Path, origin: &str, committed: &mut Committed) -> Result<(), OpenError> {
    let Some(tree) = committed.tree else {
        return Ok(());
    };
    for _ in SLOTS {
        let seq = committed.seq + 1;
        let slot = private.join(SLOTS[(seq % 2) as usize]);
        write_in_place(
            &slot,
            &encode_slot(origin, seq, &tree, &committed.edge, &[]).pieces(),
        )
        .and_then(|f| f.sync_data())
        .map_err(io_err(&slot))?;
        committed.seq = seq;
    }
    tracing::info!("state slots rewritten in this release's format");
    Ok(())
}

/// Why the committed state could not be loaded.
enum LoadError {
    Io(PathBuf, io::Error),
    Corrupt(PathBuf, String),
    Origin(String),
}

/// The newest valid state slot, the full tiles it carries and its format, or an empty
/// log (and no format) when none was ever written.
fn load_committed(
    private: &Path,
    origin: &str,
) -> Result<(Committed, Carried, Option<SlotFormat>), LoadError> {
    let mut best: Option<(PathBuf, Slot)> = None;
    let mut unreadable = Vec::new();
    for name in SLOTS {
        let path = private.join(name);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(LoadError::Io(path, e)),
        };
        // An empty or torn slot is the one a crash interrupted: the other holds the
        // last commit.
        let slot = match decode_slot(&bytes) {
            Ok(slot) => slot,
            Err(why) => {
                if !bytes.is_empty() {
                    unreadable.push((path, why));
                }
                continue;
            }
        };
        if best
            .as_ref()
            .is_none_or(|(_, b)| slot.committed.seq > b.committed.seq)
        {
            best = Some((path, slot));
        }
    }
    let v1 = private.join("state");
    match best {
        Some((_, slot)) if slot.origin != origin => Err(LoadError::Origin(slot.origin)),
        Some((_, slot)) => Ok((slot.committed, slot.carried, Some(slot.format))),
        None => {
            // Only the first commit (sequence 1, slot 1) can leave no valid slot
            // behind: anything else unreadable is damage, and starting a new tree over
            // the old one's files would fork the log.
            let first = std::ffi::OsStr::new(SLOTS[1]);
            if let Some(i) = unreadable
                .iter()
                .position(|(p, _)| p.file_name() != Some(first))
            {
                let (path, why) = unreadable.swap_remove(i);
                return Err(LoadError::Corrupt(path, why));
            }
            if v1.exists() {
                return Err(LoadError::Corrupt(
                    v1,
                    format!(
                        "{STATE_MAGIC_V1:?} is a development format this release does not read"
                    ),
                ));
            }
            Ok((
                Committed {
                    tree: None,
                    edge: Arc::new(Vec::new()),
                    seq: 0,
                },
                None,
                None,
            ))
        }
    }
}

/// Tessera's integrated tree state, relative to the log root.
const TESSERA_TREE_STATE: &str = ".state/treeState";
/// Tessera's state format version file, and the only version this release reads.
const TESSERA_VERSION: &str = ".state/version";
const TESSERA_VERSION_SUPPORTED: &str = "1";
/// The locks Tessera's POSIX storage takes (`flock`) to integrate, publish and GC.
const TESSERA_LOCKS: [&str; 3] = [
    ".state/treeState.lock",
    ".state/publish.lock",
    ".state/gcState.lock",
];

/// Take Tessera's locks if this is (or was) a Tessera directory, so no Tessera process
/// can integrate into it while tlogd has it open.
fn lock_tessera(root: &Path) -> Result<Vec<File>, OpenError> {
    if !root.join(".state").is_dir() {
        return Ok(Vec::new());
    }
    let mut held = Vec::new();
    for name in TESSERA_LOCKS {
        let path = root.join(name);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        // SAFETY: valid fd.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == -1 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                OpenError::TesseraLocked(root.to_path_buf(), path)
            } else {
                OpenError::Io(path, e)
            });
        }
        held.push(f);
    }
    Ok(held)
}

/// Tessera's `.state/treeState`: `{"size":N,"root":"<base64 of 32 bytes>"}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TesseraTreeState {
    size: u64,
    root: String,
}

/// Read a Tessera log's state and public edge, and check they agree (module docs).
fn adopt_tessera(root: &Path, origin: &str) -> Result<Committed, OpenError> {
    use base64::Engine as _;
    let refuse = |m: String| OpenError::Tessera(root.to_path_buf(), m);
    match fs::read_to_string(root.join(TESSERA_VERSION)) {
        Ok(v) if v.trim() == TESSERA_VERSION_SUPPORTED => {}
        Ok(v) => {
            return Err(refuse(format!(
                "{TESSERA_VERSION} is {:?}; only version {TESSERA_VERSION_SUPPORTED} is supported",
                v.trim()
            )));
        }
        // Tessera wrote no version file before it introduced version 1.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(OpenError::Io(root.join(TESSERA_VERSION), e)),
    }
    let state_path = root.join(TESSERA_TREE_STATE);
    let text = fs::read(&state_path).map_err(io_err(&state_path))?;
    let ts: TesseraTreeState = serde_json::from_slice(&text).map_err(|e| {
        refuse(format!(
            "{TESSERA_TREE_STATE} is not a Tessera tree state: {e}"
        ))
    })?;
    let state_root: tlogd_core::hash::Hash = base64::engine::general_purpose::STANDARD
        .decode(ts.root.as_bytes())
        .ok()
        .and_then(|r| r.try_into().ok())
        .ok_or_else(|| {
            refuse(format!(
                "{TESSERA_TREE_STATE}: root is not base64 of 32 bytes"
            ))
        })?;
    let state = TreeState::new(ts.size, state_root);
    // The edge at that size, from the public files.
    let mut edge = Vec::new();
    for id in edge_ids(state.size, TileKind::Entries) {
        let path = root.join(id.path());
        let bytes = fs::read(&path).map_err(|e| {
            refuse(format!(
                "{TESSERA_TREE_STATE} says size {} but {} cannot be read: {e}",
                state.size,
                id.path()
            ))
        })?;
        edge.push((id, bytes));
    }
    let mut levels: Vec<Vec<tlogd_core::hash::Hash>> = Vec::new();
    for (id, bytes) in &edge {
        if let TileKind::Hash { level } = id.kind {
            let hashes = tile::parse_hash_tile(bytes, id.width)
                .map_err(|e| refuse(format!("{}: {e}", id.path())))?;
            let l = level as usize;
            if levels.len() <= l {
                levels.resize(l + 1, Vec::new());
            }
            levels[l] = hashes;
        }
    }
    let tree = tlogd_core::merkle::TileTree::from_edge(state.size, levels.clone())
        .map_err(|e| refuse(format!("edge tiles at size {}: {e}", state.size)))?;
    if tree.root() != state.root {
        return Err(refuse(format!(
            "{TESSERA_TREE_STATE} and the public tiles disagree: the edge tiles at size {} hash to root {}, the tree state says {}",
            state.size,
            base64::engine::general_purpose::STANDARD.encode(tree.root()),
            ts.root
        )));
    }
    if let Some((id, bytes)) = edge.iter().find(|(id, _)| id.kind == TileKind::Entries) {
        let entries = tlogd_core::bundle::parse_bundle(bytes)
            .map_err(|e| refuse(format!("{}: {e}", id.path())))?;
        let level0 = levels.first().map(Vec::as_slice).unwrap_or_default();
        let agree = entries.len() == level0.len()
            && entries
                .iter()
                .zip(level0)
                .all(|(e, h)| tlogd_core::hash::leaf_hash(e) == *h);
        if !agree {
            return Err(refuse(format!(
                "{} does not match the level-0 tile at size {}",
                id.path(),
                state.size
            )));
        }
    }
    check_tessera_checkpoint(root, origin, &state).map_err(refuse)?;
    Ok(Committed {
        tree: Some(state),
        edge: Arc::new(edge),
        seq: 0,
    })
}

/// The public checkpoint of a Tessera log being adopted must be of this log and name a
/// prefix of the adopted tree: its root is recomputed from the tiles at its size. Its
/// signature is the engine's to check (it knows the key).
fn check_tessera_checkpoint(root: &Path, origin: &str, state: &TreeState) -> Result<(), String> {
    use tlogd_core::checkpoint::Checkpoint;
    let bytes = match fs::read(root.join("checkpoint")) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("checkpoint: {e}")),
    };
    let cp = tlogd_core::note::Note::parse(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|n| Checkpoint::parse(&n.text).map_err(|e| e.to_string()))
        .map_err(|e| format!("checkpoint: {e}"))?;
    if cp.origin != origin {
        return Err(format!(
            "its checkpoint is for the log {:?}, not {origin:?}",
            cp.origin
        ));
    }
    if cp.size > state.size {
        return Err(format!(
            "the checkpoint names size {} but {TESSERA_TREE_STATE} only {}",
            cp.size, state.size
        ));
    }
    let mut tiles = std::collections::HashMap::new();
    for id in tlogd_core::proof::tree_root_tiles(cp.size) {
        // A partial may be gone once its full tile exists (tlog-tiles "Partial Tiles").
        let (got, bytes) = match fs::read(root.join(id.path())) {
            Ok(b) => (id, b),
            Err(_) => match fs::read(root.join(id.full().path())) {
                Ok(b) => (id.full(), b),
                Err(e) => return Err(format!("{} cannot be read: {e}", id.path())),
            },
        };
        let mut hashes =
            tile::parse_hash_tile(&bytes, got.width).map_err(|e| format!("{}: {e}", got.path()))?;
        hashes.truncate(id.width as usize);
        tiles.insert(id, hashes);
    }
    let cp_root = tlogd_core::proof::tree_root(cp.size, &tiles)
        .map_err(|e| format!("checkpoint of size {}: {e}", cp.size))?;
    if cp_root != cp.root {
        return Err(format!(
            "the checkpoint and the public tiles disagree: the tiles at size {} hash to another root than the checkpoint's",
            cp.size
        ));
    }
    Ok(())
}

fn tile_level(id: &TileId) -> u8 {
    match id.kind {
        TileKind::Hash { level } => level,
        TileKind::Entries => SLOT_ENTRIES,
        TileKind::Data => SLOT_DATA,
    }
}

/// A state slot's record as written: its own fields in one small buffer, the tiles'
/// bytes borrowed where they are, so that a commit neither copies the edge and the
/// carried tiles into one buffer nor reads them more than once for the checksum.
struct SlotRecord<'a> {
    /// Every byte of the record but the tiles' own: magic, length, fields, each
    /// tile's header, the checksum.
    meta: Vec<u8>,
    /// Each tile's bytes and where in `meta` they go (after its header).
    tiles: Vec<(usize, &'a [u8])>,
}

impl SlotRecord<'_> {
    /// The record's bytes in order: `meta` up to the first tile, its bytes, `meta` up
    /// to the next, and so on.
    fn pieces(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(2 * self.tiles.len() + 1);
        let mut at = 0;
        for &(to, bytes) in &self.tiles {
            out.push(&self.meta[at..to]);
            out.push(bytes);
            at = to;
        }
        out.push(&self.meta[at..]);
        out
    }

    /// The whole record in one buffer (tests and tools; a commit writes the pieces).
    #[cfg(test)]
    fn to_vec(&self) -> Vec<u8> {
        self.pieces().concat()
    }
}

/// The CRC-32C of `pieces` one after the other (see [`SLOT_CRC_LEN`] for why this
/// checksum).
fn crc32c<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    for p in pieces {
        crc.update(p);
    }
    // A 32-bit CRC, in the low half.
    crc.finalize() as u32
}

/// A state slot's record (v5): magic, the record's length, origin, sequence number,
/// size, root, the edge tiles, the carried full tiles (committed, public file not yet
/// known durable), and the CRC-32C of all that. Integers are big-endian.
fn encode_slot<'a>(
    origin: &str,
    seq: u64,
    tree: &TreeState,
    edge: &'a [(TileId, Vec<u8>)],
    carried: &[(&TileId, &'a [u8])],
) -> SlotRecord<'a> {
    let n_tiles = edge.len() + carried.len();
    let mut meta = Vec::with_capacity(SLOT_MAGIC.len() + origin.len() + 64 + 15 * n_tiles);
    let mut tiles = Vec::with_capacity(n_tiles);
    meta.extend_from_slice(SLOT_MAGIC);
    // The length, filled in below.
    meta.extend_from_slice(&[0; 4]);
    meta.extend_from_slice(&(origin.len() as u16).to_be_bytes());
    meta.extend_from_slice(origin.as_bytes());
    meta.extend_from_slice(&seq.to_be_bytes());
    meta.extend_from_slice(&tree.to_bytes());
    meta.push(edge.len() as u8);
    for (id, bytes) in edge {
        encode_tile_header(&mut meta, id, bytes);
        tiles.push((meta.len(), &bytes[..]));
    }
    meta.extend_from_slice(&(carried.len() as u32).to_be_bytes());
    for &(id, bytes) in carried {
        encode_tile_header(&mut meta, id, bytes);
        tiles.push((meta.len(), bytes));
    }
    // A frozen tree ends with one flags byte; a writable one has none, as earlier
    // releases wrote it, and they refuse a frozen record ("trailing bytes") rather
    // than commit on it.
    if tree.frozen {
        meta.push(SLOT_FROZEN);
    }
    let len = meta.len() + tiles.iter().map(|(_, b)| b.len()).sum::<usize>() + SLOT_CRC_LEN;
    meta[SLOT_MAGIC.len()..SLOT_MAGIC.len() + 4].copy_from_slice(&(len as u32).to_be_bytes());
    let mut record = SlotRecord { meta, tiles };
    let sum = crc32c(record.pieces());
    record.meta.extend_from_slice(&sum.to_be_bytes());
    record
}

/// A tile's header in a slot record: level (255 for a bundle, 254 for a data tile),
/// index, width, length; its bytes follow.
fn encode_tile_header(out: &mut Vec<u8>, id: &TileId, bytes: &[u8]) {
    out.push(tile_level(id));
    out.extend_from_slice(&id.index.to_be_bytes());
    out.extend_from_slice(&id.width.to_be_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
}

fn decode_tile(r: &mut Reader<'_>) -> Result<(TileId, Vec<u8>), String> {
    let [level]: [u8; 1] = r.take()?;
    let index = u64::from_be_bytes(r.take()?);
    let width = u16::from_be_bytes(r.take()?);
    let len = u32::from_be_bytes(r.take()?) as usize;
    let id = match level {
        SLOT_ENTRIES => TileId::entries(index, width),
        SLOT_DATA => TileId::data(index, width),
        l => TileId::hash(l, index, width),
    };
    Ok((id, r.bytes(len)?.to_vec()))
}

/// The format of a slot record read (the magic names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotFormat {
    /// The whole file, SHA-256, no carried tiles.
    V2,
    /// Length-prefixed, SHA-256, no carried tiles.
    V3,
    /// Length-prefixed, SHA-256, carried tiles.
    V4,
    /// Length-prefixed, CRC-32C, carried tiles: what this release writes.
    V5,
}

/// A decoded slot: its origin, the committed state and edge, the full tiles it
/// carries (`None` for a record of a format before v4, which carries none), and its
/// format.
struct Slot {
    origin: String,
    committed: Committed,
    carried: Carried,
    format: SlotFormat,
}

/// Inverse of [`encode_slot`] for a slot file's bytes (a v5, v4 or v3 record and what
/// follows it, or a v2 record alone); checks the checksum, that the edge is exactly the
/// set of partial tiles of the tree's size, and that carried tiles are full and inside
/// the tree.
fn decode_slot(b: &[u8]) -> Result<Slot, String> {
    let format = [
        (SLOT_MAGIC, SlotFormat::V5),
        (SLOT_MAGIC_V4, SlotFormat::V4),
        (SLOT_MAGIC_V3, SlotFormat::V3),
        (SLOT_MAGIC_V2, SlotFormat::V2),
    ]
    .into_iter()
    .find(|(magic, _)| b.starts_with(magic))
    .map(|(_, format)| format)
    .ok_or("bad magic")?;
    // Every magic has the same length.
    let (record, fields) = if format == SlotFormat::V2 {
        (b, SLOT_MAGIC_V2.len())
    } else {
        let len: [u8; 4] = b
            .get(SLOT_MAGIC.len()..SLOT_MAGIC.len() + 4)
            .ok_or("truncated")?
            .try_into()
            .map_err(|_| "length")?;
        let record = b
            .get(..u32::from_be_bytes(len) as usize)
            .ok_or("truncated")?;
        (record, SLOT_MAGIC.len() + 4)
    };
    let sum_len = match format {
        SlotFormat::V5 => SLOT_CRC_LEN,
        _ => 32,
    };
    let body = record
        .len()
        .checked_sub(sum_len)
        .map(|n| &record[..n])
        .filter(|body| body.len() >= fields)
        .ok_or("too short")?;
    let sum = &record[body.len()..];
    let sum_ok = match format {
        SlotFormat::V5 => crc32c([body]).to_be_bytes()[..] == *sum,
        _ => Sha256::digest(body)[..] == *sum,
    };
    if !sum_ok {
        return Err("checksum mismatch".into());
    }
    // v4 and v5 records carry tiles, and may end with the frozen flag.
    let carries = matches!(format, SlotFormat::V4 | SlotFormat::V5);
    let mut r = Reader(&body[fields..]);
    let origin_len = u16::from_be_bytes(r.take()?) as usize;
    let origin = String::from_utf8(r.bytes(origin_len)?.to_vec()).map_err(|_| "origin")?;
    let seq = u64::from_be_bytes(r.take()?);
    let mut tree = TreeState::from_bytes(r.bytes(40)?).ok_or("state")?;
    let n: [u8; 1] = r.take()?;
    let mut edge = Vec::with_capacity(n[0] as usize);
    for _ in 0..n[0] {
        edge.push(decode_tile(&mut r)?);
    }
    let carried = if carries {
        let n = u32::from_be_bytes(r.take()?);
        let mut carried = Vec::new();
        for _ in 0..n {
            let (id, bytes) = decode_tile(&mut r)?;
            if !id.is_full() || tile_end(&id) > tree.size {
                return Err(format!(
                    "carried tile {} is not a full tile of size {}",
                    id.path(),
                    tree.size
                ));
            }
            if matches!(id.kind, TileKind::Hash { .. }) && bytes.len() != 32 * id.width as usize {
                return Err(format!(
                    "carried tile {} has {} bytes",
                    id.path(),
                    bytes.len()
                ));
            }
            if carried.iter().any(|(c, _)| *c == id) {
                return Err(format!("tile {} carried twice", id.path()));
            }
            carried.push((id, bytes));
        }
        Some(carried)
    } else {
        None
    };
    if carries && r.0 == [SLOT_FROZEN] {
        tree.frozen = true;
        r.0 = &[];
    }
    if !r.0.is_empty() {
        return Err("trailing bytes".into());
    }
    let want: Vec<TileId> =
        edge_ids(tree.size, bundle_kind(edge.iter().map(|(id, _)| id))).collect();
    if edge.iter().map(|(id, _)| *id).ne(want.iter().copied()) {
        return Err(format!("edge tiles do not match size {}", tree.size));
    }
    Ok(Slot {
        origin,
        committed: Committed {
            tree: Some(tree),
            edge: Arc::new(edge),
            seq,
        },
        carried,
        format,
    })
}

/// The partial tiles of a tree of `size`, hash tiles by level, then the bundle (of
/// `kind`: tlog-tiles entry bundles, or a CT log's data tiles).
fn edge_ids(size: u64, kind: TileKind) -> impl Iterator<Item = TileId> {
    tile::edge_tiles(size)
        .into_iter()
        .chain(tile::edge_bundle(size).map(move |id| id.with_kind(kind)))
}

/// The kind of bundle among `tiles` (a batch's, an edge's): the log's personality
/// decides it, and a log never mixes two. Entry bundles when none is there.
fn bundle_kind<'a>(mut tiles: impl Iterator<Item = &'a TileId>) -> TileKind {
    tiles
        .find(|id| id.kind.is_bundle())
        .map_or(TileKind::Entries, |id| id.kind)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let b = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
}

/// The prefix of the committed edge tile at `id`'s position, if the edge holds it.
fn edge_prefix(edge: &[(TileId, Vec<u8>)], id: &TileId) -> Option<Vec<u8>> {
    let (have, bytes) = edge
        .iter()
        .find(|(e, _)| e.kind == id.kind && e.index == id.index)?;
    tile::tile_prefix(id.kind, bytes, have.width, id.width).map(<[u8]>::to_vec)
}

impl Inner {
    fn tile_path(&self, id: &TileId) -> PathBuf {
        self.root.join(id.path())
    }

    fn temp_path(&self) -> PathBuf {
        let n = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        self.private.join("tmp").join(format!("t{n}"))
    }

    fn ensure_dir(&self, dir: &Path) -> io::Result<()> {
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
    fn ensure_public_dir(&self, dir: &Path, sync: &mut DirSync) -> io::Result<()> {
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
    fn sync_dirs(&self, sync: DirSync) -> Result<(), StorageError> {
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

    /// [`LogStorage::put_blob`] (see the module documentation); `key` is checked.
    fn put_blob(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let path = self.root.join(key);
        // Already stored (the common case for a CT issuer): compare, write nothing.
        match fs::read(&path) {
            Ok(stored) => return same_blob(&path, &stored, bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(blob_error("reading blob", &path, e)),
        }
        let tmp = self.temp_path();
        let linked = self.write_and_link(&tmp, &path, bytes);
        // The temp name goes whatever happened: the link (if any) holds the bytes. A
        // temp left by a crash is removed at the next open.
        let _ = fs::remove_file(&tmp);
        if !linked? {
            // Another writer got there first: its bytes stand, if they are ours.
            let stored = fs::read(&path).map_err(|e| blob_error("reading blob", &path, e))?;
            return same_blob(&path, &stored, bytes);
        }
        Ok(())
    }

    /// The steps of [`Inner::put_blob`] that leave a temp file behind: write and sync
    /// `tmp`, create the missing directories of `path` durably, link `tmp` at `path`,
    /// sync the directory. `Ok(false)`: something is at `path` already (the link
    /// never replaces it).
    fn write_and_link(&self, tmp: &Path, path: &Path, bytes: &[u8]) -> Result<bool, StorageError> {
        let write = |e| blob_error("writing blob", path, e);
        let mut f = File::create(tmp).map_err(write)?;
        f.write_all(bytes).map_err(write)?;
        self.synced(|| f.sync_all(), path)?;
        drop(f);
        let dir = path.parent().unwrap_or(&self.root);
        self.create_dirs_durably(dir)?;
        match fs::hard_link(tmp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Synced anyway: the other writer may not have synced its link yet.
                self.sync_dir(dir)?;
                return Ok(false);
            }
            Err(e) => return Err(write(e)),
        }
        self.sync_dir(dir)?;
        Ok(true)
    }

    /// Create `dir` and its missing ancestors below the root, syncing the parent of
    /// each directory created, so that its entry survives a crash too.
    fn create_dirs_durably(&self, dir: &Path) -> Result<(), StorageError> {
        let mut missing = Vec::new();
        let mut d = dir;
        while d != self.root && !d.is_dir() {
            missing.push(d);
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
        for d in missing.into_iter().rev() {
            match fs::create_dir(d) {
                Ok(()) => {}
                // Created by a concurrent writer, which may not have synced its parent
                // yet: synced below anyway.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(blob_error("creating directory", d, e)),
            }
            self.sync_dir(d.parent().unwrap_or(&self.root))?;
        }
        Ok(())
    }

    /// `fsync` a directory, under the sync lock; a failure poisons the store.
    fn sync_dir(&self, dir: &Path) -> Result<(), StorageError> {
        let d = File::open(dir).map_err(|e| blob_error("opening directory", dir, e))?;
        self.synced(|| d.sync_all(), dir)
    }

    /// Write a private file (no temp file: nothing reads it before the next sync).
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            self.ensure_dir(dir)?;
        }
        let mut f = File::create(path)?;
        f.write_all(bytes)
    }

    fn staged_path(&self, id: &TileId) -> PathBuf {
        self.private.join(STAGED_DIR).join(id.path())
    }

    /// `syncfs` the log's filesystem; see [`Inner::synced`].
    fn sync_all_files(&self) -> Result<(), StorageError> {
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
    fn synced(
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

    fn check_poisoned(&self) -> Result<(), StorageError> {
        if self.poisoned.load(Ordering::Acquire) {
            // Refused at once (HTTP 503): retrying cannot help before a restart.
            return Err(StorageError::WritesRefused(
                "an earlier fsync failed; restart tlogd to re-read the log from disk".into(),
            ));
        }
        Ok(())
    }

    fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
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
        //    older slot, made durable by the slot's one `fdatasync`. A partial the batch
        //    did not change is the same tile as before.
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

    /// Poison the store after a failed sync of `what` (see [`Inner::synced`]); the
    /// error's message.
    fn poison(&self, e: io::Error, what: &Path) -> String {
        self.poisoned.store(true, Ordering::Release);
        tracing::error!(error = %e, path = %what.display(), "sync failed; no more commits until restart");
        format!(
            "sync of {}: {e}; restart tlogd to re-read the log from disk",
            what.display()
        )
    }

    /// 5. Flush: make the pending tiles durable at their staging paths (one `syncfs`),
    ///    rename them to their public paths, and stop carrying them. The rename need not
    ///    be durable yet: a crash that loses it leaves the synced staged file, which the
    ///    next open renames (see [`recover`]).
    ///
    ///    Returns how many tiles it published.
    fn flush(&self) -> Result<usize, StorageError> {
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
            // the slots stop carrying these tiles.
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
    fn run_flusher(&self) {
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

    /// Write the partial tiles of a checkpoint of `size`, then the checkpoint.
    fn publish(&self, size: u64, signed: &[u8]) -> Result<(), StorageError> {
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

/// Write `record` (its pieces, one after the other) at the start of the slot file at
/// `path` (which exists), leaving any bytes after it, for the caller to `fdatasync`:
/// no new inode, no directory update. The file's size changes only when the record
/// outgrows it, by [`SLOT_GROWTH`].
fn write_in_place(path: &Path, record: &[&[u8]]) -> io::Result<File> {
    use std::os::unix::fs::FileExt;
    let f = OpenOptions::new().write(true).open(path)?;
    let len = f.metadata()?.len();
    let record_len: u64 = record.iter().map(|p| p.len() as u64).sum();
    if record_len > len {
        // Grow first, with zeros after the old bytes, and only then write the record:
        // if the disk is full the growth fails with the old record untouched. Written
        // the other way round, a record could land whole while its padding failed,
        // and a commit reported as failed would be read back as committed at the next
        // start. Zeros written, not a hole or `fallocate`d space: overwriting those
        // would still change the inode (extent allocation or conversion) at each
        // commit.
        let grown = record_len.next_multiple_of(SLOT_GROWTH as u64);
        let zeros = vec![0u8; (grown - len) as usize];
        f.write_all_at(&zeros, len)?;
    }
    let mut slices: Vec<io::IoSlice<'_>> = record.iter().map(|p| io::IoSlice::new(p)).collect();
    write_all_vectored_at(&f, &mut slices, 0)?;
    Ok(f)
}

/// `pwritev(2)` all of `bufs` at `offset`, as [`FileExt::write_all_at`] does for one
/// buffer: again after a short write or `EINTR`, at most `UIO_MAXIOV` buffers a call.
/// (std's `write_vectored_at` is not stable.)
///
/// [`FileExt::write_all_at`]: std::os::unix::fs::FileExt::write_all_at
fn write_all_vectored_at(
    f: &File,
    mut bufs: &mut [io::IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    // Drops leading empty buffers.
    io::IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = bufs.len().min(libc::UIO_MAXIOV as usize);
        let at = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees
        // it); the first `n` of them are valid buffers that outlive the call, and the
        // descriptor is open.
        let written = unsafe {
            libc::pwritev(
                f.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                at,
            )
        };
        match written {
            -1 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 => return Err(io::ErrorKind::WriteZero.into()),
            w => {
                offset += w as u64;
                io::IoSlice::advance_slices(&mut bufs, w as usize);
            }
        }
    }
    Ok(())
}

/// A blob found at `path` holds `bytes`, or else the other bytes stand.
fn same_blob(path: &Path, stored: &[u8], bytes: &[u8]) -> Result<(), StorageError> {
    if stored != bytes {
        return Err(StorageError::Corrupt(format!(
            "blob {} already holds other bytes ({} bytes, not these {})",
            path.display(),
            stored.len(),
            bytes.len()
        )));
    }
    Ok(())
}

fn blob_error(what: &str, path: &Path, e: io::Error) -> StorageError {
    StorageError::from_io(format!("{what} {}: {e}", path.display()), &e)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seq: u64) -> (TreeState, Vec<u8>) {
        let tree = TreeState::new(3, [seq as u8; 32]);
        let edge: Vec<(TileId, Vec<u8>)> = edge_ids(3, TileKind::Entries)
            .map(|id| (id, vec![seq as u8; id.width as usize * 32]))
            .collect();
        let record = encode_slot("example.com/log", seq, &tree, &edge, &[]).to_vec();
        (tree, record)
    }

    /// The v4 encoder of the previous release, as it was (SHA-256 checksum, one
    /// buffer): its records must still open.
    fn encode_slot_v4(
        origin: &str,
        seq: u64,
        tree: &TreeState,
        edge: &[(TileId, Vec<u8>)],
        carried: &[(&TileId, &[u8])],
    ) -> Vec<u8> {
        fn encode_tile(out: &mut Vec<u8>, id: &TileId, bytes: &[u8]) {
            out.push(tile_level(id));
            out.extend_from_slice(&id.index.to_be_bytes());
            out.extend_from_slice(&id.width.to_be_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        let mut out = Vec::new();
        out.extend_from_slice(SLOT_MAGIC_V4);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(origin.len() as u16).to_be_bytes());
        out.extend_from_slice(origin.as_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&tree.to_bytes());
        out.push(edge.len() as u8);
        for (id, bytes) in edge {
            encode_tile(&mut out, id, bytes);
        }
        out.extend_from_slice(&(carried.len() as u32).to_be_bytes());
        for (id, bytes) in carried {
            encode_tile(&mut out, id, bytes);
        }
        if tree.frozen {
            out.push(SLOT_FROZEN);
        }
        let len = (out.len() + 32) as u32;
        out[SLOT_MAGIC_V4.len()..SLOT_MAGIC_V4.len() + 4].copy_from_slice(&len.to_be_bytes());
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum);
        out
    }

    type Tile = (TileId, Vec<u8>);

    /// A tree of 600 entries, its edge, and two full tiles it may carry.
    fn tree_600() -> (TreeState, Vec<Tile>, [Tile; 2]) {
        let tree = TreeState::new(600, [1; 32]);
        let edge = edge_ids(600, TileKind::Entries)
            .map(|id| (id, vec![2; id.width as usize * 32]))
            .collect();
        let carried = [
            (TileId::hash(0, 1, 256), vec![3u8; 256 * 32]),
            (TileId::entries(0, 256), vec![4u8; 999]),
        ];
        (tree, edge, carried)
    }

    #[test]
    fn the_slot_checksum_is_crc32c() {
        // The standard check value of CRC-32C (iSCSI, RFC 3720), and the same CRC over
        // any split into pieces.
        assert_eq!(crc32c([&b"123456789"[..]]), 0xe306_9283);
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = crc32c([&data[..]]);
        for cuts in [
            &[0, 1, 15][..],
            &[3, 4096, 4111, 69_999],
            &[64, 128, 50_000],
        ] {
            let mut pieces = Vec::new();
            let mut at = 0;
            for &c in cuts {
                pieces.push(&data[at..c]);
                at = c;
            }
            pieces.push(&data[at..]);
            assert_eq!(crc32c(pieces), whole, "{cuts:?}");
        }
    }

    #[test]
    fn a_slot_record_is_read_past_stale_bytes_and_a_torn_one_is_refused() {
        let (tree, record) = sample(7);
        assert!(record.starts_with(b"tlogd-posix-state v5\n"));
        let slot = decode_slot(&record).unwrap();
        assert_eq!(
            (
                slot.origin.as_str(),
                slot.committed.seq,
                slot.committed.tree,
                slot.carried,
                slot.format
            ),
            (
                "example.com/log",
                7,
                Some(tree),
                Some(Vec::new()),
                SlotFormat::V5
            )
        );
        // What a slot file holds after a shorter record overwrote a longer one.
        let mut file = record.clone();
        file.extend_from_slice(&[0xa5; 5000]);
        assert_eq!(decode_slot(&file).unwrap().committed.seq, 7);
        // Torn: the record's end never reached the disk, or one of its bytes differs.
        assert!(decode_slot(&record[..record.len() - 1]).is_err());
        for at in [SLOT_MAGIC.len() + 2, record.len() / 2, record.len() - 1] {
            let mut torn = file.clone();
            torn[at] ^= 1;
            assert!(decode_slot(&torn).is_err(), "byte {at}");
        }
        // The length itself damaged: past the end, or short of the checksum.
        for len in [u32::MAX, 10] {
            let mut bad = record.clone();
            bad[SLOT_MAGIC.len()..SLOT_MAGIC.len() + 4].copy_from_slice(&len.to_be_bytes());
            assert!(decode_slot(&bad).is_err());
        }
    }

    #[test]
    fn a_v5_record_round_trips_with_carried_tiles_and_the_frozen_flag() {
        let (mut tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        for frozen in [false, true] {
            tree.frozen = frozen;
            let record = encode_slot("o", 5, &tree, &edge, &[(&t1, &b1), (&t2, &b2)]);
            // The pieces are the tiles' own bytes, not copies.
            let pieces = record.pieces();
            assert!(pieces.iter().any(|p| std::ptr::eq(*p, &b1[..])));
            assert!(pieces.iter().any(|p| std::ptr::eq(*p, &edge[0].1[..])));
            let bytes = record.to_vec();
            let len = u32::from_be_bytes(bytes[21..25].try_into().unwrap());
            assert_eq!(len as usize, bytes.len());
            let slot = decode_slot(&bytes).unwrap();
            assert_eq!(slot.committed.tree, Some(tree));
            assert_eq!(*slot.committed.edge, edge);
            assert_eq!(slot.carried, Some(vec![(t1, b1.clone()), (t2, b2.clone())]));
            assert_eq!(slot.format, SlotFormat::V5);
        }
    }

    #[test]
    fn slots_of_the_previous_formats_are_read() {
        // v4: what the previous release's encoder wrote, with carried tiles and frozen.
        let (mut tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        for frozen in [false, true] {
            tree.frozen = frozen;
            let mut v4 = encode_slot_v4("o", 5, &tree, &edge, &[(&t1, &b1), (&t2, &b2)]);
            v4.extend_from_slice(&[7; 100]);
            let slot = decode_slot(&v4).unwrap();
            assert_eq!(
                (slot.committed.seq, slot.committed.tree, slot.format),
                (5, Some(tree), SlotFormat::V4)
            );
            assert_eq!(*slot.committed.edge, edge);
            assert_eq!(slot.carried, Some(vec![(t1, b1.clone()), (t2, b2.clone())]));
            // Its checksum is checked as before.
            let at = v4.len() - 100 - 40;
            v4[at] ^= 1;
            assert!(decode_slot(&v4).is_err());
        }
        // v3: a v4 record without the carried tiles (not even their count); v2: the
        // same fields without the length either, nothing after the checksum.
        let (tree, _) = sample(9);
        let edge: Vec<(TileId, Vec<u8>)> = edge_ids(3, TileKind::Entries)
            .map(|id| (id, vec![9; id.width as usize * 32]))
            .collect();
        let record = encode_slot_v4("example.com/log", 9, &tree, &edge, &[]);
        let fields = &record[SLOT_MAGIC_V4.len() + 4..record.len() - 32 - 4];
        let mut v3 = SLOT_MAGIC_V3.to_vec();
        v3.extend_from_slice(&((SLOT_MAGIC_V3.len() + 4 + fields.len() + 32) as u32).to_be_bytes());
        v3.extend_from_slice(fields);
        let sum = Sha256::digest(&v3);
        v3.extend_from_slice(&sum);
        v3.extend_from_slice(&[7; 100]);
        let mut v2 = SLOT_MAGIC_V2.to_vec();
        v2.extend_from_slice(fields);
        let sum = Sha256::digest(&v2);
        v2.extend_from_slice(&sum);
        for (old, format) in [(&v3, SlotFormat::V3), (&v2, SlotFormat::V2)] {
            let slot = decode_slot(old).unwrap();
            assert_eq!(
                (
                    slot.committed.seq,
                    slot.committed.tree,
                    slot.carried,
                    slot.format
                ),
                (9, Some(tree), None, format)
            );
        }
        let mut trailing = v2.clone();
        trailing.push(0);
        assert!(decode_slot(&trailing).is_err());
    }

    #[test]
    fn a_slot_carries_full_tiles_of_its_tree_only() {
        let (tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        let record = encode_slot("o", 5, &tree, &edge, &[(&t1, &b1), (&t2, &b2)]).to_vec();
        let slot = decode_slot(&record).unwrap();
        assert_eq!(slot.committed.tree, Some(tree));
        assert_eq!(slot.carried, Some(vec![(t1, b1.clone()), (t2, b2)]));
        // A partial tile, or a full one beyond the tree, is not a committed tile.
        for bad in [TileId::hash(0, 2, 88), TileId::entries(2, 256)] {
            let record = encode_slot("o", 5, &tree, &edge, &[(&bad, &b1)]).to_vec();
            assert!(decode_slot(&record).is_err(), "{}", bad.path());
        }
    }

    #[test]
    fn a_torn_v5_slot_is_refused_and_the_other_slot_wins() {
        let (tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        let carried = [(&t1, &b1[..]), (&t2, &b2[..])];
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path();
        for name in SLOTS {
            File::create(private.join(name)).unwrap();
        }
        // Sequence 6 in state.0, then 7 in state.1 over a longer record 5 (what a
        // slot holds after commits whose records shrank), written as a commit does.
        let write = |seq: u64, carried: &[(&TileId, &[u8])]| {
            let record = encode_slot("o", seq, &tree, &edge, carried);
            let path = private.join(SLOTS[(seq % 2) as usize]);
            write_in_place(&path, &record.pieces()).unwrap();
            (path, record.to_vec())
        };
        write(5, &carried);
        write(6, &carried[..1]);
        let (newest, record) = write(7, &[]);
        let load = || load_committed(private, "o").map_err(|_| "load failed");
        let (c, carried7, format) = load().unwrap();
        assert_eq!(
            (c.seq, carried7, format),
            (7, Some(Vec::new()), Some(SlotFormat::V5))
        );
        let file = fs::read(&newest).unwrap();
        assert_eq!(&file[..record.len()], &record[..]);
        // One byte flipped anywhere in the record (a header, a tile, the checksum), or
        // its end never written (the rest of the file still holds record 5 and zeros):
        // the older slot, with the tile it carries, is the committed state.
        let flips = [SLOT_MAGIC.len() + 5, record.len() / 3, record.len() - 1];
        let tears = [record.len() / 2, record.len() - 1];
        let mut torn_files = Vec::new();
        for at in flips {
            let mut torn = file.clone();
            torn[at] ^= 0x40;
            torn_files.push(torn);
        }
        let record5 = encode_slot("o", 5, &tree, &edge, &carried).to_vec();
        for at in tears {
            let mut torn = file.clone();
            torn[at..record5.len()].copy_from_slice(&record5[at..]);
            torn_files.push(torn);
        }
        for torn in torn_files {
            fs::write(&newest, &torn).unwrap();
            let (c, carried6, _) = load().unwrap();
            assert_eq!(c.seq, 6);
            assert_eq!(carried6, Some(vec![(t1, b1.clone())]));
        }
    }

    #[test]
    fn a_slot_file_grows_in_steps_and_never_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.0");
        File::create(&path).unwrap();
        let len = || std::fs::metadata(&path).unwrap().len();
        write_in_place(&path, &[&[1; 60], &[], &[1; 40]]).unwrap();
        assert_eq!(len(), SLOT_GROWTH as u64);
        write_in_place(&path, &[&[2; 10]]).unwrap();
        assert_eq!(len(), SLOT_GROWTH as u64);
        let b = std::fs::read(&path).unwrap();
        assert_eq!((&b[..10], &b[10..100]), (&[2; 10][..], &[1; 90][..]));
        assert!(b[100..].iter().all(|&z| z == 0));
        write_in_place(&path, &[&vec![3; SLOT_GROWTH], &[3]]).unwrap();
        assert_eq!(len(), 2 * SLOT_GROWTH as u64);
        let b = std::fs::read(&path).unwrap();
        assert!(b[..SLOT_GROWTH + 1].iter().all(|&x| x == 3));
        assert!(b[SLOT_GROWTH + 1..].iter().all(|&z| z == 0));
    }

    #[test]
    fn more_pieces_than_one_pwritev_takes_are_all_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.0");
        File::create(&path).unwrap();
        let owned: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![i as u8; (i % 7) as usize])
            .collect();
        let pieces: Vec<&[u8]> = owned.iter().map(|p| &p[..]).collect();
        write_in_place(&path, &pieces).unwrap();
        let want = pieces.concat();
        let b = std::fs::read(&path).unwrap();
        assert_eq!(&b[..want.len()], &want[..]);
    }

    /// Every file below `root`, relative, sorted, the private directory skipped.
    fn public_files(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p == root.join(PRIVATE_DIR) {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_blob_is_linked_whole_and_leaves_no_temp_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = PosixStorage::open(&root, "example.com/log").unwrap();
            let blob: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
            let ct = "application/pkix-cert";
            s.put_blob("issuer/a/b", &blob, ct).await.unwrap();
            s.put_blob("issuer/a/b", &blob, ct).await.unwrap();
            match s.put_blob("issuer/a/b", &blob[1..], ct).await {
                Err(StorageError::Corrupt(m)) => assert!(m.contains("other bytes"), "{m}"),
                other => panic!("expected Corrupt, got {other:?}"),
            }
            // A key below a file: the link fails, after the temp file was written.
            assert!(s.put_blob("issuer/a/b/c", b"x", ct).await.is_err());
            let tmp = root.join(PRIVATE_DIR).join("tmp");
            assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "temp files left");
            // Exactly the whole blob, at one path (the temp name is gone).
            let public = root.join("issuer/a/b");
            assert_eq!(fs::read(&public).unwrap(), blob);
            assert_eq!(fs::metadata(&public).unwrap().nlink(), 1);
            assert_eq!(public_files(&root), ["issuer/a/b"]);
            assert_eq!(
                s.read_blob("issuer/a/b").await.unwrap().as_deref(),
                Some(&blob[..])
            );
            assert_eq!(s.read_blob("issuer/a/c").await.unwrap(), None);
            // A refused key writes nothing.
            assert!(s.put_blob("../x", b"x", ct).await.is_err());
            assert!(!dir.path().join("x").exists());
        });
    }

    #[test]
    fn kernels_before_5_8_are_told_apart() {
        let cases = [
            ("4.18.0-553.el8_10.x86_64", Some(false)),
            ("5.4.0-200-generic\n", Some(false)),
            ("5.8.0", Some(true)),
            ("5.10.0-33-amd64", Some(true)),
            ("6.18.44-fc-v669", Some(true)),
            ("10.0", Some(true)),
            ("", None),
            ("linux", None),
        ];
        for (release, want) in cases {
            assert_eq!(release_at_least(release, (5, 8)), want, "{release:?}");
        }
    }
}
