//! The whole-log check (`tlogd verify`): `tlogd-core`'s checker
//! ([`tlogd_core::engine::checker`]), the one every storage test runs too, over the
//! fetchers of [`crate::fetch`]. Its module documentation lists what is checked.

pub use tlogd_core::engine::checker::{EntryCheck, FsckOptions, FsckProgress, FsckSummary, fsck};
