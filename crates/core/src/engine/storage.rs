//! The one storage trait every backend implements, and the durability contract.

use std::future::Future;

use crate::hash::Hash;
use crate::tile::TileId;

/// The committed state of the tree: the commit point of every batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeState {
    /// Number of entries in the tree.
    pub size: u64,
    /// RFC 6962 root hash of the tree at `size`.
    pub root: Hash,
    /// The log is frozen: it takes no more entries, ever (a CT shard past its window, a
    /// retired log). Set by one last compare-and-swap to the same size and root
    /// ([`TreeState::into_frozen`]), so it binds every frontend of a shared store, and a
    /// commit racing the freeze loses its swap (its `prev` is not frozen). Part of the
    /// state every backend compares and stores; states of older releases read as not
    /// frozen.
    pub frozen: bool,
}

impl TreeState {
    /// The empty tree.
    pub fn empty() -> Self {
        TreeState::new(0, crate::hash::empty_root())
    }

    /// A writable tree of `size` with `root`.
    pub fn new(size: u64, root: Hash) -> Self {
        TreeState {
            size,
            root,
            frozen: false,
        }
    }

    /// This tree, frozen: the `next` of the commit that freezes the log (a batch of no
    /// tiles; docs/seams.md, "Freezing").
    pub fn into_frozen(self) -> Self {
        TreeState {
            frozen: true,
            ..self
        }
    }

    /// The same tree (size and root), frozen or not.
    pub fn same_tree(&self, other: &TreeState) -> bool {
        self.size == other.size && self.root == other.root
    }

    /// Fixed 40-byte encoding of `size` (big-endian) and `root`, used by backends that
    /// store the state as one blob; each stores [`frozen`](Self::frozen) its own way.
    pub fn to_bytes(&self) -> [u8; 40] {
        let mut out = [0u8; 40];
        out[..8].copy_from_slice(&self.size.to_be_bytes());
        out[8..].copy_from_slice(&self.root);
        out
    }

    /// Inverse of [`TreeState::to_bytes`] (not frozen).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != 40 {
            return None;
        }
        let mut size = [0u8; 8];
        size.copy_from_slice(&b[..8]);
        let mut root = [0u8; 32];
        root.copy_from_slice(&b[8..]);
        Some(TreeState::new(u64::from_be_bytes(size), root))
    }
}

/// One integrated batch, handed to [`LogStorage::commit`].
#[derive(Debug)]
pub struct CommitBatch {
    /// The state the batch was built on.
    pub prev: TreeState,
    /// The state after the batch.
    pub next: TreeState,
    /// Every hash tile and entry bundle the batch created or changed, full ones first
    /// in tree order, then the partial right edge. Bytes are the tlog-tiles encodings.
    pub tiles: Vec<(TileId, Vec<u8>)>,
}

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The stored state is not the batch's `prev`: another writer advanced the tree.
    /// Nothing of the batch was made visible as committed.
    #[error("tree state conflict: storage is at size {found}, batch expected {expected}")]
    Conflict {
        /// The size the batch was built on.
        expected: u64,
        /// The size found in storage.
        found: u64,
    },
    /// The stored data is not what a correct log would hold.
    #[error("corrupt log storage: {0}")]
    Corrupt(String),
    /// The store refuses writes: no space left (`ENOSPC`, `EDQUOT`), a read-only
    /// filesystem (`EROFS`), permission denied (`EACCES`, `EPERM`). The operation did
    /// not take effect (a failed write, not a failed sync). Adds are pushed back at once
    /// (HTTP 503) instead of retried, and the log recovers by itself once the store
    /// takes writes again.
    #[error("storage refuses writes: {0}")]
    WritesRefused(String),
    /// Any other backend failure (I/O, network, database). The operation may or may not
    /// have taken effect, but from [`LogStorage::commit`] it is *settled*: once the
    /// state reads back without the batch, the batch can no longer land (it never left,
    /// or the backend fenced it off: ended the session that sent a `COMMIT`, rewrote
    /// the record a lost swap was conditional on).
    #[error("{0}")]
    Backend(String),
    /// A failed [`LogStorage::commit`] that may still take effect *after* the state
    /// reads back without it: a `COMMIT` whose session could not be ended, a swap whose
    /// fence failed, a sync that failed on pages a restart may still find on disk.
    /// The engine never answers such a batch "not logged": its adds get
    /// [`AddError::Uncertain`](super::AddError::Uncertain) (resubmit) and every later
    /// attempt checks whether it landed.
    #[error("{0}")]
    Unsettled(String),
}

impl From<std::io::Error> for StorageError {
    fn from(e: std::io::Error) -> Self {
        StorageError::from_io(e.to_string(), &e)
    }
}

impl StorageError {
    /// An I/O error with context: [`StorageError::WritesRefused`] when the device is
    /// full, read-only or not permitted, [`StorageError::Backend`] otherwise.
    pub fn from_io(context: impl std::fmt::Display, e: &std::io::Error) -> Self {
        // Linux: EPERM 1, EACCES 13, ENOSPC 28, EROFS 30, EDQUOT 122.
        match e.raw_os_error() {
            Some(1 | 13 | 28 | 30 | 122) => StorageError::WritesRefused(context.to_string()),
            _ => StorageError::Backend(context.to_string()),
        }
    }
}

/// Where a log lives. Backends are thin adapters; the protocol is in the engine.
///
/// # Contract
///
/// * **Durable once it returns.** When [`commit`](Self::commit) returns `Ok`, every
///   tile of the batch and the new [`TreeState`] survive a crash or power loss.
/// * **The tree state is the commit point.** `commit` makes the batch's tiles durable
///   *before* (or atomically with) advancing the state from `prev` to `next`; a crash
///   before the state advances leaves the old state in force.
/// * **Public paths hold committed bytes only** (the engine's invariant 1): tiles of a
///   batch are staged where readers cannot see them until the state names the batch
///   (a private staging area, a transaction, a staged object), so a reader never sees,
///   and a CDN never caches, bytes that a crash or a lost race would later replace.
/// * **Compare-and-swap.** `commit` advances the state only if the stored state equals
///   `batch.prev`; otherwise it returns [`StorageError::Conflict`]. This is what lets
///   several frontends share one store without forking the tree.
/// * **Idempotent writes.** Re-writing identical bytes to an existing full tile or bundle
///   succeeds (a batch may be retried after an error that did in fact persist).
/// * **Errors are uncertain.** A [`StorageError::Backend`] from `commit` may have
///   persisted ("fail but persist") or not ("fail and don't persist"): the engine
///   re-reads the state with [`load_state`](Self::load_state) to learn which. What it
///   reads is final for `Backend`; a commit that may still land later (a request in
///   flight that could not be fenced) returns [`StorageError::Unsettled`] instead, and
///   its adds are answered "uncertain", never "not logged". Either way the engine
///   checks again whenever it later finds the tree grown.
/// * **Conflict is definite.** [`StorageError::Conflict`] means this attempt did not
///   and never will commit. A backend that cannot tell (a swap whose answer was lost,
///   read back on a tree that has moved past it) returns `Backend`, and the engine
///   learns from the stored tree whether the batch is in it.
/// * **Publishing is separate.** [`publish_checkpoint`](Self::publish_checkpoint) stores
///   the signed checkpoint readers see; it only ever names a committed state, so it may
///   lag the tree but never lead it.
/// * **Public may follow durable.** A backend may make a committed batch's tiles
///   readable at their public paths after `commit` returns (an object store uploads
///   them from the staged copy in the background). Then `publish_checkpoint` waits until
///   every tile of the size it publishes is readable (invariant 4), and `read_tile` of
///   a tile this process committed waits for its upload rather than answer `None`.
/// * **Freezing is a commit of no tiles.** A batch whose `next` is its `prev` with
///   [`TreeState::frozen`] set, and no tiles, freezes the log: the same compare-and-swap
///   as any commit, so a commit racing it loses (its `prev` is not frozen). The flag is
///   stored with the state and read back by [`load_state`](Self::load_state); a backend
///   never commits on a frozen state (the engine never asks it to).
/// * **Blobs are write-once.** [`put_blob`](Self::put_blob) stores bytes beside the
///   tree at a public path the tree does not own (CT's issuer certificates at
///   `issuer/<hex SHA-256>`, the versions of a CT log's roots, [`super::versioned`]),
///   checked by [`check_blob_key`]: put if absent, atomically, with a byte compare (so
///   it is a compare-and-swap on "nothing there yet"). It is durable once it returns; identical bytes already
///   there are `Ok`; other bytes there are [`StorageError::Corrupt`] and nothing
///   changes; a crash never leaves partial bytes at the key. Blobs are independent of
///   the tree state: no commit, checkpoint or sequencer is involved, and any frontend
///   may write one at any time.
pub trait LogStorage: Send + Sync + 'static {
    /// A short name for metrics and logs ("posix", "mysql", "memory").
    fn backend_name(&self) -> &'static str;

    /// The committed tree state, or `None` for a log never written.
    fn load_state(&self) -> impl Future<Output = Result<Option<TreeState>, StorageError>> + Send;

    /// Stage the batch's tiles durably, then compare-and-swap the tree state.
    fn commit(&self, batch: CommitBatch) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// Read a hash tile or entry bundle exactly as stored at its tlog-tiles path.
    fn read_tile(
        &self,
        id: &TileId,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StorageError>> + Send;

    /// [`read_tile`](Self::read_tile) for a public reader (the daemon's `GET /tile/...`),
    /// not for the engine. A backend whose commits and reads share a bounded resource
    /// (a connection pool) serves these from one of their own, so that readers can
    /// never take what commits need (#35); the default is `read_tile`.
    fn read_public_tile(
        &self,
        id: &TileId,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StorageError>> + Send {
        self.read_tile(id)
    }

    /// [`read_tile`](Self::read_tile) of several tiles, in order. A networked store
    /// answers in one round trip (reloading the right edge after another frontend
    /// committed reads four or five tiles); the default reads them one by one.
    fn read_tiles(
        &self,
        ids: &[TileId],
    ) -> impl Future<Output = Result<Vec<Option<Vec<u8>>>, StorageError>> + Send {
        async move {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.push(self.read_tile(id).await?);
            }
            Ok(out)
        }
    }

    /// Durably store the public signed checkpoint.
    fn publish_checkpoint(
        &self,
        signed: &[u8],
    ) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// The public signed checkpoint, if any was published.
    fn read_checkpoint(&self)
    -> impl Future<Output = Result<Option<Vec<u8>>, StorageError>> + Send;

    /// Store a write-once, content-addressed blob published beside the tree at the
    /// public path `key` (CT's issuer certificates, static-ct-api "Issuers"): put if
    /// absent, with a byte compare. Durable once it returns. Identical bytes already at
    /// `key`: `Ok`. Other bytes there: [`StorageError::Corrupt`], and nothing changed.
    /// A crash never leaves partial bytes at `key`. A key that
    /// [`check_blob_key`] refuses is refused before anything is written.
    /// `content_type` is the HTTP `Content-Type` an object store serves it with.
    fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        content_type: &'static str,
    ) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// The blob at `key`, or `None`.
    fn read_blob(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StorageError>> + Send;

    /// [`read_blob`](Self::read_blob) for a public reader (the daemon's `GET
    /// /issuer/...`), from the readers' own resource as
    /// [`read_public_tile`](Self::read_public_tile) is; the default is `read_blob`.
    fn read_public_blob(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StorageError>> + Send {
        self.read_blob(key)
    }

    /// Cheap liveness probe for `/readyz`: can the store take writes right now?
    fn check_writable(&self) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// Take the sequencing lock shared by every frontend of this store, before the
    /// integrator reads the state and integrates a batch. Compare-and-swap alone keeps
    /// the tree from forking; the lock keeps frontends from starving each other (without
    /// it, a busy frontend advances the state between another's reload and its commit,
    /// every time). Held until [`release_sequencer`](Self::release_sequencer); only the
    /// one integrator of a process calls these. Default: a single-writer store needs no
    /// lock.
    fn acquire_sequencer(&self) -> impl Future<Output = Result<(), StorageError>> + Send {
        async { Ok(()) }
    }

    /// Release the lock taken by [`acquire_sequencer`](Self::acquire_sequencer). Best
    /// effort: a lock that cannot be released cleanly must be dropped with its
    /// connection. `idle`: the engine has nothing queued to commit (rather than having
    /// used up its slice), so another frontend waiting for the lock may have it at once.
    fn release_sequencer(&self, idle: bool) -> impl Future<Output = ()> + Send {
        let _ = idle;
        async {}
    }

    /// Whether the engine reads the stored state before committing a batch when it
    /// has just taken the sequencer ([`acquire_sequencer`](Self::acquire_sequencer)),
    /// to learn early that another frontend moved the tree. `false` where that read
    /// costs as much as the conflict it would spare (an object store: one round trip
    /// per batch against one staged object written for nothing); the compare-and-swap
    /// in [`commit`](Self::commit) catches a stale tree either way.
    fn check_state_before_commit(&self) -> bool {
        true
    }

    /// Whether [`read_tile`](Self::read_tile) only ever returns tiles of a committed
    /// tree. POSIX files of a batch are visible before its state commits, so the
    /// daemon must fence reads at its own committed size (the default, `false`). A
    /// transactional store (MySQL) returns `true`, so a frontend also serves tiles that
    /// another frontend sharing the store committed.
    fn reads_are_committed(&self) -> bool {
        false
    }
}

/// The longest blob key, in bytes (the SQL backends' key column).
pub const MAX_BLOB_KEY: usize = 512;

/// Check a [`LogStorage::put_blob`] / [`LogStorage::read_blob`] key; every backend
/// calls it first. A key is a relative `/`-separated path of at most [`MAX_BLOB_KEY`]
/// bytes whose segments are non-empty, made of `[A-Za-z0-9._-]`, and not `.` or `..`
/// (so it is the same file, object or row on every backend, and never escapes a POSIX
/// log root). It never names what the tree owns: `checkpoint`, anything under `tile/`,
/// and anything starting with `.` (a backend's private state, `.tlogd/`), since a blob
/// there would overwrite or shadow the log itself.
pub fn check_blob_key(key: &str) -> Result<(), StorageError> {
    // `{:?}` escapes control characters: the message stays on one line.
    let refuse = |why: &str| StorageError::Backend(format!("invalid blob key {key:?}: {why}"));
    if key.is_empty() {
        return Err(refuse("empty"));
    }
    if key.len() > MAX_BLOB_KEY {
        return Err(StorageError::Backend(format!(
            "invalid blob key of {} bytes: longer than {MAX_BLOB_KEY} bytes",
            key.len()
        )));
    }
    for segment in key.split('/') {
        if segment.is_empty() {
            return Err(refuse("empty path segment"));
        }
        if segment == "." || segment == ".." {
            return Err(refuse("relative path segment"));
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(refuse("characters other than A-Z a-z 0-9 . _ -"));
        }
    }
    if key == "checkpoint" || key == "tile" || key.starts_with("tile/") {
        return Err(refuse("a path of the tree"));
    }
    if key.starts_with('.') {
        return Err(refuse("a private path"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_keys_stay_beside_the_tree() {
        for good in [
            "issuer/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a",
            "a/b.c/d_e-F9",
            "checkpoints",
            "tiles/x",
            "a/.hidden",
        ] {
            assert!(check_blob_key(good).is_ok(), "{good}");
        }
        let long = "a".repeat(MAX_BLOB_KEY + 1);
        for bad in [
            "",
            "checkpoint",
            "tile",
            "tile/0/000",
            "tile/entries/000.p/3",
            ".tlogd/state",
            ".tlogd",
            "../x",
            "a/../b",
            "./a",
            "a/.",
            "a//b",
            "/a",
            "a/",
            "a b",
            "a\\b",
            "\u{e9}",
            "a\nb",
            long.as_str(),
        ] {
            let e = check_blob_key(bad).expect_err(bad);
            let msg = e.to_string();
            assert!(matches!(e, StorageError::Backend(_)), "{bad}: {msg}");
            assert!(msg.starts_with("invalid blob key"), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
        assert!(check_blob_key(&"a".repeat(MAX_BLOB_KEY)).is_ok());
    }
}
