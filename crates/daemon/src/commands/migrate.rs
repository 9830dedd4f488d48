//! `tlogd migrate`: the source side (a URL or a directory) and the progress a user
//! sees; the copy itself is [`tlogd_core::engine::import`], and `main.rs` opens the
//! target as `serve` would.

use std::time::Duration;

use bytes::Bytes;
use indicatif::ProgressBar;
use tlog_verify::VerifyError;
use tlog_verify::fetch::{DirFetcher, Fetch, HttpFetcher};
use tlogd_core::engine::import::CopyProgress;

/// Where a migration reads from: any tlog-tiles log, by base URL or directory.
pub enum Source {
    /// A log served over HTTP(S).
    Http(HttpFetcher),
    /// A log in a local directory (Tessera's POSIX layout is tlog-tiles').
    Dir(DirFetcher),
}

impl Source {
    /// A base URL (`scheme://...`) or a directory; `timeout` per HTTP request.
    pub fn open(location: &str, timeout: Duration) -> Result<Self, VerifyError> {
        if location.contains("://") {
            HttpFetcher::new(location, None, timeout).map(Source::Http)
        } else {
            DirFetcher::new(location).map(Source::Dir)
        }
    }
}

impl Fetch for Source {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        match self {
            Source::Http(f) => f.get(path).await,
            Source::Dir(f) => f.get(path).await,
        }
    }

    fn location(&self) -> String {
        match self {
            Source::Http(f) => f.location(),
            Source::Dir(f) => f.location(),
        }
    }
}

/// A progress bar on a terminal (entries committed to the target), nothing elsewhere.
pub struct CopyBar(ProgressBar);

impl CopyBar {
    /// Drawn on stderr unless `quiet` or stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        CopyBar(crate::commands::verify::entries_bar(quiet))
    }
}

impl CopyProgress for CopyBar {
    fn start(&mut self, from: u64, to: u64) {
        self.0.set_length(to);
        self.0.set_position(from);
        self.0.reset_eta();
    }

    fn committed(&mut self, size: u64) {
        self.0.set_position(size);
    }
}

impl Drop for CopyBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
