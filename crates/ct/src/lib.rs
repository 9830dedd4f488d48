//! The Certificate Transparency personality (C2SP static-ct-api) over tlogd's generic
//! engine: what a CT log queues, stores in its data tiles and hashes into its tree.
//!
//! A submission (`add-chain`, `add-pre-chain`) is validated before it reaches the
//! engine; what is queued is a [`Submission`]: the certificate (or the precertificate's
//! TBS and issuer key hash, and the precertificate itself) and the fingerprints of the
//! chain's issuers. At sequencing, [`StaticCt`] writes it as a static-ct-api `TileLeaf`
//! with the entry's timestamp and its `leaf_index` extension, and hashes the RFC 6962
//! `MerkleTreeLeaf` into the tree.

#![deny(missing_docs)]

pub mod chain;
mod der;
mod personality;
pub mod sct;
mod signer;
mod submission;

pub use personality::{StaticCt, certificate_dedup_key, precertificate_dedup_key};
pub use signer::{Rfc6962Check, Rfc6962Signer};
pub use submission::{Submission, SubmittedEntry, SubmittedLeaf};
