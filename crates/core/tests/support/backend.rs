//! Helpers shared by the storage backends' tests (through `#[path]`, like
//! `vectors_dir.rs`): adds that get consecutive indices in a known order, and the
//! public files of a log directory.

// Shared through `#[path]`: each test crate uses a subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tlogd_core::engine::{Log, LogConfig, LogStorage};
use tlogd_core::note::NoteSigner;

/// The key the Go reference vectors were signed with (test only).
pub const SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
/// The vectors' origin.
pub const ORIGIN: &str = "example.com/log/testdata";

/// A log config with batches of `batch` entries, queues that never push back and a
/// checkpoint after nearly every batch.
pub fn config(batch: usize) -> LogConfig {
    let signer = Arc::new(NoteSigner::from_skey(SKEY).unwrap());
    let mut c = LogConfig::new(ORIGIN, signer);
    c.batch_max_entries = batch;
    c.max_pending_entries = 1 << 20;
    c.max_pending_bytes = 1 << 30;
    c.checkpoint_interval = Duration::from_millis(1);
    c
}

/// Every file below `dir`, relative, sorted; a POSIX log's private `.tlogd` is skipped.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == ".tlogd") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Add `entries` so that they get consecutive indices in order: every add is pushed
/// before the (current-thread) integrator runs, so batches are exactly the configured
/// batch size long.
pub async fn add_in_order<S: LogStorage>(log: &Log<S>, entries: Vec<Bytes>, first: u64) {
    let futs = entries.into_iter().map(|e| log.add(e));
    let outs = join_all_in_order(futs).await;
    for (i, o) in outs.into_iter().enumerate() {
        assert_eq!(o.unwrap().index, first + i as u64);
    }
}

async fn join_all_in_order<F: std::future::Future>(
    futs: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    // Poll in order once (pushing every entry), then await each.
    let mut handles: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut done: Vec<Option<F::Output>> = Vec::with_capacity(handles.len());
    for h in handles.iter_mut() {
        match h.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => done.push(Some(v)),
            std::task::Poll::Pending => done.push(None),
        }
    }
    let mut out = Vec::with_capacity(handles.len());
    for (h, d) in handles.into_iter().zip(done) {
        out.push(match d {
            Some(v) => v,
            None => h.await,
        });
    }
    out
}
