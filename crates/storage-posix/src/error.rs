//! Why a log directory could not be opened: [`OpenError`], for every step of the open
//! (lock, state read back, Tessera adoption, recovery).

use std::io;
use std::path::{Path, PathBuf};

/// Why the log directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process holds the log's lock.
    #[error("log directory {0} is in use by another tlogd process (lock on {1} is held)")]
    Locked(PathBuf, PathBuf),
    /// The directory holds a log with another origin.
    #[error("log directory {dir} holds the log {found:?}, not {expected:?}")]
    OriginMismatch {
        /// The log root.
        dir: PathBuf,
        /// The origin configured.
        expected: String,
        /// The origin on disk.
        found: String,
    },
    /// The state file is unreadable.
    #[error("corrupt state file {0}: {1}")]
    CorruptState(PathBuf, String),
    /// Filesystem error.
    #[error("{0}: {1}")]
    Io(PathBuf, io::Error),
    /// A Tessera log's state and public files disagree, or cannot be read: it is not
    /// adopted.
    #[error("refusing to adopt the Tessera log in {0}: {1}")]
    Tessera(PathBuf, String),
    /// A Tessera process holds one of the directory's Tessera locks.
    #[error("log directory {0} is in use by a Tessera process (lock on {1} is held)")]
    TesseraLocked(PathBuf, PathBuf),
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |e| OpenError::Io(path.to_path_buf(), e)
}
