//! [`ServedLog`]: one running log seen without its storage type, so a daemon can hold
//! logs of different backends side by side (docs/seams.md, "Several logs").

use super::cosign::BoxFuture;
use super::{Log, LogStorage, StorageError, TreeState};

/// What a daemon needs of a running log beyond its HTTP routes (which are built while
/// the type is still known): identity, sizes, health, freezing, shutdown. Object
/// safe, implemented for every [`Log`]; the hot paths (adds, reads) never go through
/// it.
pub trait ServedLog: Send + Sync + 'static {
    /// The log's name ([`LogConfig::name`](super::LogConfig::name)).
    fn name(&self) -> &str;
    /// The checkpoint origin.
    fn origin(&self) -> &str;
    /// The storage backend's short name.
    fn backend_name(&self) -> &'static str;
    /// The verifier key of the log's first signer.
    fn vkey(&self) -> String;
    /// See [`Log::committed_size`].
    fn committed_size(&self) -> u64;
    /// See [`Log::published_size`].
    fn published_size(&self) -> Option<u64>;
    /// See [`Log::queue_depth`].
    fn queue_depth(&self) -> usize;
    /// See [`Log::dedup_lag`].
    fn dedup_lag(&self) -> u64;
    /// See [`Log::is_ready`].
    fn is_ready(&self) -> bool;
    /// See [`Log::is_frozen`].
    fn is_frozen(&self) -> bool;
    /// [`LogStorage::check_writable`] of the log's storage.
    fn check_writable(&self) -> BoxFuture<'_, Result<(), StorageError>>;
    /// See [`Log::freeze`].
    fn freeze(&self) -> BoxFuture<'_, Result<TreeState, String>>;
    /// See [`Log::failed`].
    fn failed(&self) -> BoxFuture<'_, String>;
    /// See [`Log::shutdown`].
    fn shutdown(&self);
    /// The blobs of the log's storage (a document kept beside the tree:
    /// [`versioned`](super::versioned)).
    fn blobs(&self) -> std::sync::Arc<dyn super::versioned::BlobStore>;
}

impl<S: LogStorage> ServedLog for Log<S> {
    fn name(&self) -> &str {
        &self.config().name
    }
    fn origin(&self) -> &str {
        &self.config().origin
    }
    fn backend_name(&self) -> &'static str {
        self.storage().backend_name()
    }
    fn vkey(&self) -> String {
        self.config().verifier().to_vkey()
    }
    fn committed_size(&self) -> u64 {
        Log::committed_size(self)
    }
    fn published_size(&self) -> Option<u64> {
        Log::published_size(self)
    }
    fn queue_depth(&self) -> usize {
        Log::queue_depth(self)
    }
    fn dedup_lag(&self) -> u64 {
        Log::dedup_lag(self)
    }
    fn is_ready(&self) -> bool {
        Log::is_ready(self)
    }
    fn is_frozen(&self) -> bool {
        Log::is_frozen(self)
    }
    fn check_writable(&self) -> BoxFuture<'_, Result<(), StorageError>> {
        Box::pin(self.storage().check_writable())
    }
    fn freeze(&self) -> BoxFuture<'_, Result<TreeState, String>> {
        Box::pin(Log::freeze(self))
    }
    fn failed(&self) -> BoxFuture<'_, String> {
        Box::pin(Log::failed(self))
    }
    fn shutdown(&self) {
        Log::shutdown(self)
    }
    fn blobs(&self) -> std::sync::Arc<dyn super::versioned::BlobStore> {
        self.storage().clone()
    }
}
