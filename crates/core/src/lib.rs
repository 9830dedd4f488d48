//! tlogd-core: the C2SP tlog-tiles log in Rust.
//!
//! The format and math modules ([`hash`], [`tile`], [`bundle`], [`merkle`], [`proof`],
//! [`note`], [`subtree`], [`mldsa`], [`keys`], [`personality`], [`checkpoint`], [`cosignature`],
//! [`witness`], [`time`]) are pure: no I/O, no async runtime. The [`engine`] module
//! (feature `engine`, on by default) is the generic sequencing queue, integrator and
//! checkpoint publisher over the [`engine::LogStorage`] trait.

pub mod bundle;
pub mod checkpoint;
pub mod cosignature;
pub mod hash;
pub mod keys;
pub mod merkle;
pub mod mldsa;
pub mod note;
pub mod personality;
pub mod proof;
pub mod subtree;
pub mod tile;
pub mod time;
pub mod witness;

#[cfg(feature = "engine")]
pub mod engine;

#[cfg(any(feature = "conformance", all(test, feature = "engine")))]
pub mod conformance;
