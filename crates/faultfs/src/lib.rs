//! faultfs: a fault-injecting FUSE filesystem for tlogd's crash and latency tests.
//!
//! `kill -9` is not a power cut: the page cache survives it, so a crash test built on it
//! cannot tell a missing fsync from a correct one. faultfs passes every operation through
//! to a backing directory, keeps track of what has not been made durable, and on command
//! loses it, as a power cut would. It also slows operations down like a network or cloud
//! block device, and injects I/O errors.
//!
//! ```no_run
//! use faultfs::{CutMode, Mount, Options, Profile};
//! # fn main() -> Result<(), faultfs::Error> {
//! let m = Mount::new("/tmp/backing", "/tmp/mnt", Options::with_profile(Profile::network()))?;
//! // ... run the log on /tmp/mnt ...
//! let report = m.cut(CutMode::Subset { seed: 7 })?; // freeze, lose what a cut would
//! assert!(report.discarded() > 0, "a cut that discards nothing proves nothing");
//! drop(m); // unmount; a new Mount of /tmp/backing shows what survived
//! # Ok(()) }
//! ```
//!
//! # The durability model
//!
//! The backing directory holds the live view (what the page cache shows). What is durable:
//!
//! * **File data** as of the file's last `fsync` or `fdatasync` (both make data and size
//!   durable; metadata such as mode and times is not modelled). A write through a
//!   descriptor opened with `O_SYNC`/`O_DSYNC` makes the file's data durable at once
//!   (Linux follows such a write with an fsync of the whole file). A new file has no
//!   durable data until it is synced.
//! * **Directory entries** as of the directory's last `fsync`: a create, mkdir, symlink,
//!   link, unlink, rmdir or rename is durable only once the directory it changed is
//!   synced, both directories for a rename across two. An fsync of a new file does not
//!   make its name durable (strict POSIX; ext4 happens to be kinder).
//! * Nothing else: in particular not `sync(2)` or `syncfs(2)`, which FUSE never passes
//!   on to faultfs (see *Findings* below), so data "made durable" by a `syncfs` is lost
//!   in a cut, as it would be on such a filesystem.
//!
//! A **cut** ([`Mount::cut`], `faultfs cut MNT`) freezes the mount (every later operation
//! fails with EIO at once; nothing blocks; only what the kernel answers from its own
//! caches, such as cached pages of a file still open, may still be read), then rewrites the backing directory to what
//! survives: [`CutMode::All`] keeps nothing that was pending; [`CutMode::Subset`] keeps,
//! like a real disk, a prefix in order of the pending namespace operations (a journal)
//! and an arbitrary subset of the pending data writes, a third of those spanning a
//! sector boundary torn (only their first 512-byte sectors kept), all chosen by a seed
//! so a failing test can be replayed. The [`CutReport`] says how many operations were
//! pending and discarded (a cut that discards nothing proves nothing) and names the last
//! operations before the freeze (`rename tile/0/x001.tmp -> tile/0/x001`), which says
//! what the log was doing. Then drop the [`Mount`]; a new one of the same backing
//! directory shows what survived.
//!
//! Memory: a file changed since its last sync has its durable content copied in memory
//! at the first change, and every pending write keeps its data until the next sync.
//! That suits tests; a log that never syncs a large file holds it all.
//!
//! # Latency
//!
//! A [`Profile`] gives each [`OpKind`] a latency range: `none`, `cloud-block` (fsyncs
//! ~1 ms), `network` (fsyncs 5–10 ms, create/rename/unlink/open/setattr 1–2 ms), with
//! per-operation overrides. Delayed operations wait on a pool of workers, not in the
//! FUSE event loop, so a sleeping fsync of one file does not hold up other files'
//! operations; the state lock is never held across a delay.
//!
//! # Errors
//!
//! [`Faults`]: EIO on the Nth fsync (once; its changes stay not durable), EIO on the Nth
//! write (once; nothing written), ENOSPC after N more bytes (a write that crosses the
//! limit writes what fits and returns that short count; the next write fails with
//! ENOSPC), EROFS for every change from a moment on.
//!
//! # Lifetime
//!
//! Dropping a [`Mount`] (also while a panic unwinds) unmounts it, lazily if it is busy,
//! then aborts the FUSE connection if anything still holds it, so that no operation on a
//! dead mount can hang. If the process is killed, the kernel aborts the connection when
//! `/dev/fuse` closes (operations fail with ENOTCONN) and fusermount3, started with
//! `auto_unmount`, unmounts. Mounting needs `/dev/fuse`, `fusermount3` (Debian's `fuse3`)
//! and, as run here, root; [`check_fuse_available`] says what is missing.
//!
//! # Findings: `syncfs(2)` and FUSE (Linux 6.18)
//!
//! Measured on this kernel (Linux 6.18.44) with `crates/faultfs/scripts/syncfs-probe.sh`,
//! which traces the requests the faultfs server reads from `/dev/fuse` (strace, opcode
//! taken from the raw `fuse_in_header`) while a shell calls each of these:
//!
//! | call | requests faultfs receives |
//! | --- | --- |
//! | `syncfs(2)` on a file in the mount (`sync -f FILE`) | OPEN, FLUSH, RELEASE (of the descriptor `sync -f` opens), nothing else |
//! | `syncfs(2)` on the mount's root | OPENDIR, RELEASEDIR |
//! | `sync(2)` | nothing |
//! | `fsync(2)` on the file (control) | OPEN, FSYNC, FLUSH, RELEASE |
//!
//! So a filesystem served through `/dev/fuse` never sees `syncfs`: no `FUSE_SYNCFS`
//! (opcode 50), no FSYNC, nothing, and `syncfs` still returns 0. This matches our reading
//! of the kernel's `fs/fuse`: `fuse_sync_fs()` sends `FUSE_SYNCFS` only when the
//! connection's `sync_fs` flag is set, which virtiofs sets and a `/dev/fuse` mount does
//! not (fuser 0.18 does not even know opcode 50). faultfs is write-through (no FUSE
//! writeback cache), so there are no dirty pages for `syncfs` to write back either.
//!
//! Consequence: on a FUSE filesystem `syncfs` makes nothing durable, and faultfs models
//! exactly that: data "made durable" by a `syncfs` is lost in a cut (test
//! `syncfs_does_not_reach_faultfs_so_it_makes_nothing_durable`). tlogd's POSIX backend,
//! which makes staged tiles durable with one `syncfs`, therefore needs per-file fsyncs
//! (a `storage.sync = fsync` mode) on FUSE, and on any network filesystem whose
//! `syncfs` is not a commit to stable storage.

#![warn(missing_docs)]

pub mod control;
mod fs;
mod handle;
mod mount;
pub mod profile;
mod rng;
mod sched;
mod state;
mod sys;

pub use handle::Handle;
pub use mount::{Mount, Options, check_fuse_available};
pub use profile::{Latency, OpKind, Profile};
pub use state::{CutMode, CutReport, Faults, OpRecord, SECTOR};

use std::path::PathBuf;

/// What can go wrong setting up or controlling a mount.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This machine cannot mount FUSE filesystems.
    #[error("FUSE is not available: {0}")]
    NoFuse(String),
    /// A path could not be used.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What the path is.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The arguments do not make sense.
    #[error("{0}")]
    Config(String),
    /// Mounting failed.
    #[error("mounting faultfs at {}: {source}", mountpoint.display())]
    Mount {
        /// Where.
        mountpoint: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The mount is still there after unmounting.
    #[error("{} is still mounted", .0.display())]
    Unmount(PathBuf),
    /// A thread could not be started.
    #[error("starting a faultfs thread: {0}")]
    Thread(#[source] std::io::Error),
    /// A second cut of the same mount.
    #[error("the mount was already cut")]
    Frozen,
    /// Rewriting the backing directory at a cut failed.
    #[error("power cut: rewriting the backing directory failed: {0}")]
    Cut(#[source] std::io::Error),
    /// The control socket could not be reached or answered nonsense.
    #[error("faultfs control: {0}")]
    Control(String),
}
