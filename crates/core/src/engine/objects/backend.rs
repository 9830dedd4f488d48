//! The object-store interface: bytes at keys, plus one compare-and-swap.

use std::future::Future;

use bytes::Bytes;

use crate::engine::StorageError;

/// What an object is, which fixes the HTTP metadata it is stored with (a bucket served
/// straight to readers, or through a CDN, needs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectClass {
    /// The public signed checkpoint: replaced as the log grows, so never cached
    /// (`Content-Type: text/plain; charset=utf-8`, `Cache-Control: no-cache`).
    Checkpoint,
    /// A hash tile or entry bundle, full or partial: its bytes never change
    /// (`Content-Type: application/octet-stream`,
    /// `Cache-Control: max-age=31536000, immutable`).
    Tile,
    /// tlogd's own records (the tree state, staged batches): never served to readers
    /// (`Content-Type: application/octet-stream`, `Cache-Control: no-store`).
    Private,
    /// A write-once, content-addressed blob beside the tree
    /// ([`LogStorage::put_blob`](crate::engine::LogStorage::put_blob), e.g. CT's issuer
    /// certificates): served with its own `Content-Type`, and, since the bytes at its
    /// key never change, `Cache-Control: max-age=31536000, immutable`.
    Blob {
        /// Its `Content-Type`.
        content_type: &'static str,
    },
}

impl ObjectClass {
    /// The `Content-Type` an object of this class carries.
    pub fn content_type(self) -> &'static str {
        match self {
            ObjectClass::Checkpoint => "text/plain; charset=utf-8",
            ObjectClass::Tile | ObjectClass::Private => "application/octet-stream",
            ObjectClass::Blob { content_type } => content_type,
        }
    }

    /// The `Cache-Control` an object of this class carries.
    pub fn cache_control(self) -> &'static str {
        match self {
            ObjectClass::Checkpoint => "no-cache",
            ObjectClass::Tile | ObjectClass::Blob { .. } => "max-age=31536000, immutable",
            ObjectClass::Private => "no-store",
        }
    }
}

/// The version of a stored object, as the store names it, for compare-and-swap: S3's
/// `ETag`, GCS's generation. Opaque to the engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectVersion {
    /// The entity tag (S3 `If-Match`).
    pub e_tag: Option<String>,
    /// A store-specific version (GCS `x-goog-if-generation-match`).
    pub version: Option<String>,
}

/// When a conditional write may take effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutCondition {
    /// Only if no object exists at the key (S3 `If-None-Match: *`, GCS
    /// `x-goog-if-generation-match: 0`).
    Absent,
    /// Only if the object at the key is still at this version (S3 `If-Match`, GCS
    /// `x-goog-if-generation-match`).
    Matches(ObjectVersion),
}

/// What a conditional write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written; the object's new version.
    Written(ObjectVersion),
    /// The condition did not hold: nothing was written.
    ConditionFailed,
}

/// A bucket (or anything like one): bytes at keys, and a conditional write.
///
/// # Contract
///
/// * **Durable once it returns.** When a write returns `Ok`, the object survives a crash
///   of this process and of the store, and every later read, from any process, sees
///   it (read-after-write consistency, as S3 and GCS give).
/// * **Atomic objects.** A reader sees an object's old bytes or its new bytes, never a
///   mix; a failed write leaves the old object or the new one.
/// * **Atomic conditional writes.** Of several [`put_if`](Self::put_if) calls racing on
///   one key with the same condition, at most one takes effect. The engine checks this
///   at start-up ([`check_conditional_writes`](super::check_conditional_writes)) and
///   refuses a store that ignores conditions: that would fork the tree under two
///   frontends.
/// * **Errors are uncertain.** An `Err` from a write may or may not have taken effect
///   ("fail but persist"). The engine only ever writes a public key with the one byte
///   string the committed tree defines for it, so retrying a plain
///   [`put`](Self::put) is always safe; the outcome of a failed [`put_if`](Self::put_if)
///   is learned by reading the key again.
/// * **Keys** are `/`-separated relative paths (`checkpoint`, `tile/0/000`,
///   `.tlogd/state`); an adapter may prepend its own prefix.
///
/// Retries of transient errors (5xx, 429, resets, timeouts) may live in the adapter
/// (object_store retries unconditional requests) or be left to the engine, which
/// retries failed writes with backoff and hedges slow ones.
pub trait ObjectBackend: Send + Sync + 'static {
    /// A short name for metrics and logs ("s3", "gcs", "memory").
    fn backend_name(&self) -> &'static str;

    /// The object at `key`, or `None` if there is none.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Bytes>, StorageError>> + Send;

    /// The object at `key` with its version, or `None` if there is none.
    fn get_versioned(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<(Bytes, ObjectVersion)>, StorageError>> + Send;

    /// Store `bytes` at `key`, replacing any object there.
    fn put(
        &self,
        key: &str,
        bytes: Bytes,
        class: ObjectClass,
    ) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// Store `bytes` at `key` only if `condition` holds, atomically.
    fn put_if(
        &self,
        key: &str,
        bytes: Bytes,
        class: ObjectClass,
        condition: PutCondition,
    ) -> impl Future<Output = Result<PutOutcome, StorageError>> + Send;

    /// Delete the object at `key`; deleting a missing object succeeds.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// The keys that start with `prefix`, in any order.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, StorageError>> + Send;
}
