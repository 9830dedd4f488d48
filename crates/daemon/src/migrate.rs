//! `tlogd migrate`: the source side (a URL or a directory) and the progress a user
//! sees; the copy itself is [`tlogd_core::engine::import`], and `main.rs` opens the
//! target as `serve` would.

use std::io::IsTerminal;
use std::time::Duration;

use bytes::Bytes;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
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
pub struct CopyBar(Option<ProgressBar>);

impl CopyBar {
    /// Drawn on stderr unless `quiet` or stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return CopyBar(None);
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} entries ({per_sec}, eta {eta})",
        ) {
            bar.set_style(style);
        }
        CopyBar(Some(bar))
    }
}

impl CopyProgress for CopyBar {
    fn start(&mut self, from: u64, to: u64) {
        if let Some(b) = &self.0 {
            b.set_length(to);
            b.set_position(from);
            b.reset_eta();
        }
    }

    fn committed(&mut self, size: u64) {
        if let Some(b) = &self.0 {
            b.set_position(size);
        }
    }
}

impl Drop for CopyBar {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
