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

pub use tlogd_core::engine::checker::VerifyError;
