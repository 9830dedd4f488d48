//! POSIX filesystem storage for tlogd, the embedded default.
//!
//! The log root holds exactly the public tlog-tiles resources (`checkpoint`,
//! `tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]`), so any static web server can
//! serve it. Private state lives in `<root>/.tlogd/`, which is never served:
//!
//! * `state`: the committed tree state (origin, size, root): the commit point;
//! * `lock`: held with an OFD (`fcntl`) write lock while a daemon has the log open
//!   (`flock` does not work over NFS; OFD locks do);
//! * `tmp/`: temporary files, renamed into place (same filesystem).
//!
//! # Commit protocol (see `tlogd_core::engine` for the engine's side)
//!
//! 1. Write every tile and bundle of the batch to a temp file and rename it to its
//!    final path. Nothing is fsynced yet: these are not committed, and a crash here
//!    leaves the old state in force with its own edge tiles untouched (partial tiles
//!    of different widths live at different paths).
//! 2. `syncfs` the filesystem once: every file and rename of the batch is durable
//!    together, instead of one serial fsync chain per file.
//! 3. Compare-and-swap the state: check the on-disk state is the batch's `prev` (we
//!    hold the only lock, so the in-memory copy is authoritative), write `state` to a
//!    temp file, fsync it, rename it over `.tlogd/state`, fsync `.tlogd/`. Committed.
//! 4. Garbage-collect the partials of tiles that became full in the previous batch
//!    (tlog-tiles "Partial Tiles": readers fall back to the full tile, which is served
//!    by then). Best effort.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use tlogd_core::engine::{CommitBatch, LogStorage, StorageError, TreeState};
use tlogd_core::tile::TileId;

const PRIVATE_DIR: &str = ".tlogd";
const STATE_MAGIC: &str = "tlogd-posix-state v1";

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
}

/// A tlog-tiles log in a directory.
pub struct PosixStorage {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    private: PathBuf,
    origin: String,
    /// Keeps the OFD lock: it is released when the last descriptor closes.
    _lock: File,
    /// The committed state, as on disk.
    state: Mutex<Option<TreeState>>,
    /// Directories known to exist (saves a mkdir per tile).
    dirs: Mutex<HashSet<PathBuf>>,
    /// Partial-tile directories of tiles that became full in the previous commit.
    /// Deleted one commit later, when the engine is sure to serve the full tiles.
    gc: Mutex<Vec<PathBuf>>,
    tmp_seq: AtomicU64,
    /// Set after a failed sync: the page cache may then hold data the disk does not,
    /// so nothing more is committed until the daemon restarts and re-reads the disk.
    poisoned: AtomicBool,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |e| OpenError::Io(path.to_path_buf(), e)
}

impl PosixStorage {
    /// Open (or create) the log `origin` at `root`, taking its lock.
    pub fn open(root: impl Into<PathBuf>, origin: &str) -> Result<Self, OpenError> {
        let root: PathBuf = root.into();
        let private = root.join(PRIVATE_DIR);
        fs::create_dir_all(private.join("tmp")).map_err(io_err(&private))?;
        let lock_path = private.join("lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
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
        let state_path = private.join("state");
        let state = match fs::read_to_string(&state_path) {
            Ok(text) => {
                let (found_origin, state) = parse_state(&text)
                    .map_err(|m| OpenError::CorruptState(state_path.clone(), m))?;
                if found_origin != origin {
                    return Err(OpenError::OriginMismatch {
                        dir: root,
                        expected: origin.to_string(),
                        found: found_origin,
                    });
                }
                Some(state)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(OpenError::Io(state_path, e)),
        };
        Ok(PosixStorage {
            inner: Arc::new(Inner {
                root,
                private,
                origin: origin.to_string(),
                _lock: lock,
                state: Mutex::new(state),
                dirs: Mutex::new(HashSet::new()),
                gc: Mutex::new(Vec::new()),
                tmp_seq: AtomicU64::new(0),
                poisoned: AtomicBool::new(false),
            }),
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

fn parse_state(text: &str) -> Result<(String, TreeState), String> {
    let mut lines = text.split('\n');
    if lines.next() != Some(STATE_MAGIC) {
        return Err(format!("first line is not {STATE_MAGIC:?}"));
    }
    let origin = lines.next().ok_or("missing origin")?.to_string();
    let size: u64 = lines
        .next()
        .ok_or("missing size")?
        .parse()
        .map_err(|e| format!("size: {e}"))?;
    let root = base64::engine::general_purpose::STANDARD
        .decode(lines.next().ok_or("missing root")?)
        .map_err(|e| format!("root: {e}"))?;
    let root: [u8; 32] = root.try_into().map_err(|_| "root is not 32 bytes")?;
    Ok((origin, TreeState { size, root }))
}

fn format_state(origin: &str, s: &TreeState) -> String {
    format!(
        "{STATE_MAGIC}\n{origin}\n{}\n{}\n",
        s.size,
        base64::engine::general_purpose::STANDARD.encode(s.root)
    )
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

    /// Temp file + rename, without fsync (the caller makes it durable).
    fn put(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            self.ensure_dir(dir)?;
        }
        let tmp = self.temp_path();
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        drop(f);
        fs::rename(&tmp, path)
    }

    /// Temp file, fsync, rename, fsync the directory.
    fn put_durable(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.temp_path();
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        File::open(dir)?.sync_all()
    }

    fn syncfs(&self) -> io::Result<()> {
        let f = File::open(&self.root)?;
        // SAFETY: valid fd.
        let rc = unsafe { libc::syncfs(f.as_raw_fd()) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(StorageError::Backend(
                "an earlier fsync failed; restart tlogd to re-read the log from disk".into(),
            ));
        }
        Ok(())
    }

    fn commit(&self, batch: &CommitBatch) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let found = state.unwrap_or_else(TreeState::empty);
        if found != batch.prev {
            return Err(StorageError::Conflict {
                expected: batch.prev.size,
                found: found.size,
            });
        }
        // 1. Tiles and bundles to their final paths.
        for (id, bytes) in &batch.tiles {
            let path = self.tile_path(id);
            self.put(&path, bytes)
                .map_err(|e| StorageError::Backend(format!("writing {}: {e}", path.display())))?;
        }
        // 2. One sync point for the whole batch.
        self.syncfs().map_err(|e| {
            self.poisoned.store(true, Ordering::Release);
            StorageError::Backend(format!("syncfs {}: {e}", self.root.display()))
        })?;
        // 3. The commit point.
        let state_path = self.private.join("state");
        self.put_durable(
            &state_path,
            format_state(&self.origin, &batch.next).as_bytes(),
        )
        .map_err(|e| {
            self.poisoned.store(true, Ordering::Release);
            StorageError::Backend(format!("writing {}: {e}", state_path.display()))
        })?;
        *state = Some(batch.next);
        drop(state);
        // 4. Partials of tiles that became full in the previous commit are no longer
        //    needed: by now the engine has acknowledged that commit and serves the full
        //    tiles, so a reader falling back from a partial always finds the full one.
        let full_now: Vec<PathBuf> = batch
            .tiles
            .iter()
            .filter(|(id, _)| id.is_full())
            .map(|(id, _)| {
                let mut p = self.tile_path(id).into_os_string();
                p.push(".p");
                PathBuf::from(p)
            })
            .collect();
        let previous = std::mem::replace(
            &mut *self.gc.lock().unwrap_or_else(|e| e.into_inner()),
            full_now,
        );
        for dir in previous {
            let _ = fs::remove_dir_all(dir);
        }
        Ok(())
    }
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
        Ok(*self.inner.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        self.blocking(move |inner| inner.commit(&batch)).await
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        read_optional(&self.inner.tile_path(id)).await
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        let signed = signed.to_vec();
        self.blocking(move |inner| {
            let path = inner.root.join("checkpoint");
            inner
                .put_durable(&path, &signed)
                .map_err(|e| StorageError::Backend(format!("writing {}: {e}", path.display())))
        })
        .await
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        read_optional(&self.inner.root.join("checkpoint")).await
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
