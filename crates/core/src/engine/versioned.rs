//! A small document that changes, kept in a log's storage with nothing but write-once
//! blobs ([`LogStorage::put_blob`]): a CT log's roots, which every frontend of a
//! shared store must serve alike and a restart must find when their source is down.
//!
//! Version `n` of the document at `prefix` is the blob `<prefix>/<n>`, `n` from 1. A
//! blob is put if absent, so writing version `n + 1` is a compare-and-swap on "the
//! newest is `n`": of two frontends writing it at once, one finds the other's bytes
//! there ([`StorageError::Corrupt`] from `put_blob`) and has lost; it reads the winner
//! and tries again on top of it. A writer only writes `n + 1` after reading `n`, so
//! the versions present are always `1..=newest`, with no gap, and the newest is found
//! in O(log n) reads by doubling, then halving ([`newest`]). Nothing is ever deleted
//! (a version is a few hundred KiB at most and changes a few times a year), so a
//! reader that knew version `k` never sees the document go back before `k`.
//!
//! The keys sit beside the tree at public paths (an object store's bucket may serve
//! them): only what may be public goes in a document.

use super::cosign::BoxFuture;
use super::storage::{LogStorage, StorageError};

/// The blobs of a log's storage, without its type: what a document needs
/// ([`LogStorage::read_blob`] and [`LogStorage::put_blob`]), object safe, so the
/// daemon can keep one beside a log it holds as a `dyn`
/// ([`ServedLog::blobs`](super::ServedLog::blobs)). Implemented for every storage.
pub trait BlobStore: Send + Sync + 'static {
    /// [`LogStorage::read_blob`].
    fn read<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>>;
    /// [`LogStorage::put_blob`].
    fn create<'a>(
        &'a self,
        key: &'a str,
        bytes: &'a [u8],
        content_type: &'static str,
    ) -> BoxFuture<'a, Result<(), StorageError>>;
}

impl<S: LogStorage> BlobStore for S {
    fn read<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>> {
        Box::pin(self.read_blob(key))
    }
    fn create<'a>(
        &'a self,
        key: &'a str,
        bytes: &'a [u8],
        content_type: &'static str,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(self.put_blob(key, bytes, content_type))
    }
}

/// The key of version `version` of the document at `prefix`.
pub fn version_key(prefix: &str, version: u64) -> String {
    format!("{prefix}/{version}")
}

/// The newest version of the document at `prefix` and its bytes, or `None` if none was
/// ever written. `known`: a version this caller has already seen (0: none), where the
/// search starts; versions before it are not read.
pub async fn newest<S: BlobStore + ?Sized>(
    storage: &S,
    prefix: &str,
    known: u64,
) -> Result<Option<(u64, Vec<u8>)>, StorageError> {
    // `low` is present (or 0), `high` absent; the bytes of `low` once read.
    let mut low = known;
    let mut low_bytes: Option<Vec<u8>> = None;
    let mut step = 1u64;
    let mut high = loop {
        let probe = low.saturating_add(step);
        match storage.read(&version_key(prefix, probe)).await? {
            Some(bytes) => {
                low = probe;
                low_bytes = Some(bytes);
                step = step.saturating_mul(2);
            }
            None => break probe,
        }
    };
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        match storage.read(&version_key(prefix, mid)).await? {
            Some(bytes) => {
                low = mid;
                low_bytes = Some(bytes);
            }
            None => high = mid,
        }
    }
    if low == 0 {
        return Ok(None);
    }
    let bytes = match low_bytes {
        Some(b) => b,
        None => storage
            .read(&version_key(prefix, low))
            .await?
            .ok_or_else(|| {
                StorageError::Corrupt(format!(
                    "{}: version {low} was read before and is gone",
                    version_key(prefix, low)
                ))
            })?,
    };
    Ok(Some((low, bytes)))
}

/// Whether a write of the next version took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// `bytes` are version `version` now (or were already: the same bytes).
    Won,
    /// Another writer's bytes are that version: read the newest and try again on it.
    Lost,
}

/// Write `bytes` as version `version` of the document at `prefix`, which must be one
/// past the newest this caller read ([`newest`]). Durable once it returns
/// [`Written::Won`].
pub async fn write<S: BlobStore + ?Sized>(
    storage: &S,
    prefix: &str,
    version: u64,
    bytes: &[u8],
    content_type: &'static str,
) -> Result<Written, StorageError> {
    let key = version_key(prefix, version);
    match storage.create(&key, bytes, content_type).await {
        Ok(()) => Ok(Written::Won),
        // Other bytes at the key: another writer's version, if it reads back.
        Err(StorageError::Corrupt(why)) => match storage.read(&key).await? {
            Some(other) if other != bytes => Ok(Written::Lost),
            _ => Err(StorageError::Corrupt(why)),
        },
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory::MemoryStorage;

    #[tokio::test]
    async fn the_newest_version_is_found_from_any_known_one() {
        let s = MemoryStorage::new();
        assert_eq!(newest(&s, "doc", 0).await.expect("read"), None);
        for v in 1..=37u64 {
            let bytes = format!("v{v}");
            assert_eq!(
                write(&s, "doc", v, bytes.as_bytes(), "text/plain")
                    .await
                    .expect("write"),
                Written::Won
            );
            for known in [0, 1, v / 2, v.saturating_sub(1), v] {
                let (n, b) = newest(&s, "doc", known)
                    .await
                    .expect("read")
                    .expect("present");
                assert_eq!((n, b), (v, bytes.clone().into_bytes()), "known {known}");
            }
        }
        // Another document beside it is its own.
        assert_eq!(newest(&s, "doc2", 0).await.expect("read"), None);
    }

    #[tokio::test]
    async fn of_two_writers_of_one_version_the_second_loses_and_changes_nothing() {
        let s = MemoryStorage::new();
        assert_eq!(
            write(&s, "doc", 1, b"one", "text/plain").await.expect("w"),
            Written::Won
        );
        assert_eq!(
            write(&s, "doc", 1, b"other", "text/plain")
                .await
                .expect("w"),
            Written::Lost
        );
        // The same bytes again (a retry whose answer was lost) take.
        assert_eq!(
            write(&s, "doc", 1, b"one", "text/plain").await.expect("w"),
            Written::Won
        );
        let (n, b) = newest(&s, "doc", 0).await.expect("r").expect("present");
        assert_eq!((n, b.as_slice()), (1, &b"one"[..]));
    }

    #[tokio::test]
    async fn a_failed_read_is_an_error_not_an_absent_document() {
        let s = MemoryStorage::new();
        write(&s, "doc", 1, b"one", "text/plain").await.expect("w");
        s.set_unreadable(true);
        assert!(newest(&s, "doc", 0).await.is_err());
    }
}
