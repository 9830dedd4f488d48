//! C2SP static-ct-api and RFC 6962 formats, byte for byte: the structures a
//! Certificate Transparency log built on tlog-tiles stores, hashes and signs.
//!
//! - [`leaf`]: the data tile's `TileLeaf` and RFC 6962's `MerkleTreeLeaf` (static-ct-api
//!   "Log entries"; RFC 6962 §3.4), and the leaf hash.
//! - [`sct`]: the SCT's signature input (RFC 6962 §3.2) and the `leaf_index` extension
//!   (static-ct-api "SCT Extension").
//! - [`sth`]: the tree head signature input (RFC 6962 §3.5) and the RFC 6962 note
//!   signature of a checkpoint (static-ct-api "Checkpoints").
//! - [`signer`]: an ECDSA P-256 log key: its `LogID`, RFC 6979 deterministic signatures
//!   as `DigitallySigned` structs.
//!
//! No runtime dependencies: hashing and P-256 only.

#![deny(missing_docs)]

pub mod leaf;
pub mod sct;
pub mod signer;
pub mod sth;
mod tls;

pub use leaf::{LogEntry, MerkleTreeLeaf, TileLeaf, parse_data_tile, split_data_tile};
pub use signer::LogKey;

/// A structure that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {why}")]
pub struct FormatError {
    /// What was being read ("TileLeaf", "extensions").
    pub what: &'static str,
    /// What is wrong with it.
    pub why: String,
}

pub(crate) fn format_error(what: &'static str, why: impl Into<String>) -> FormatError {
    FormatError {
        what,
        why: why.into(),
    }
}

/// Bytes from hex digits, spaces ignored (the known answers are written that way).
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}
