//! Recomputing a log's hash tiles and root from its entry bundles, and comparing them
//! with what the log serves: the whole-log checker's ([`crate::fsck`]), also used by
//! the load generator's full readers.

pub use tlogd_core::engine::checker::{TreeRebuilder, compare_tile};
