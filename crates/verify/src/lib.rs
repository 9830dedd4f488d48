//! tlog-verify: verified reads of any C2SP tlog-tiles log, from a base URL or a local
//! directory, and the whole-log check behind `tlogd verify`.
//!
//! One implementation of "is this log what it claims to be", shared by `tlogd verify`
//! and the load generator (`tlog-loadgen`):
//!
//! * [`fetch`]: where the log's resources come from ([`fetch::HttpFetcher`],
//!   [`fetch::DirFetcher`]);
//! * [`reader`]: checkpoints verified against the log's key, bundles, tiles, inclusion
//!   and consistency proofs built from tiles;
//! * [`rebuild`]: hash tiles recomputed from entry bundles and compared with the log's;
//! * [`fsck`]: the whole log, every bundle and tile up to the checkpoint, in parallel.
//!
//! The formats and the Merkle math are `tlogd-core`'s; HTTP is `tlogd-http`'s.

pub mod fetch;
pub mod fsck;
pub mod reader;
pub mod rebuild;

/// A log that could not be read, or is not what it claims to be. Messages name the
/// resource (tlog-tiles path) at fault.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A transport failure or an unexpected HTTP status: nothing is known about the
    /// log's contents.
    #[error("{0}")]
    Fetch(String),
    /// A resource the log must serve is absent.
    #[error("{0}: not found")]
    NotFound(String),
    /// A resource is malformed or disagrees with the rest of the log.
    #[error("{0}")]
    Invalid(String),
    /// The checkpoint does not verify with the log's key and origin.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}
