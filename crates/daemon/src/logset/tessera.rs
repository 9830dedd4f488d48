//! A POSIX directory Go Tessera wrote, adopted in place (`tlogd_storage_posix`): checked
//! whole, as `tlogd verify` checks a log, before the daemon appends to it.

use std::time::Instant;

use tlog_verify::VerifyError;
use tlog_verify::fetch::DirFetcher;
use tlog_verify::fsck::{FsckOptions, FsckSummary, fsck};
use tlogd_core::engine::TreeState;
use tlogd_core::note::NoteVerifier;

/// Before serving a Tessera log adopted at `state` (see `tlogd_storage_posix`), check
/// the whole of it as `tlogd verify` would, up to that tree state: every bundle, every
/// hash tile, the root; and its published checkpoint, if any: its signature with this
/// log's keys (`keys`, every configured signer's: one of them at least signed it), and
/// its consistency with the tree state.
pub(crate) async fn check_adopted_tessera(
    dir: &std::path::Path,
    origin: &str,
    keys: &[NoteVerifier],
    state: TreeState,
) -> anyhow::Result<()> {
    let Some((verifier, more_keys)) = keys.split_first() else {
        anyhow::bail!("no key to check the adopted Tessera log's checkpoint with");
    };
    tracing::info!(size = state.size, dir = %dir.display(), "adopting a Tessera log: checking it first");
    let fetch = DirFetcher::new(dir)?;
    let mut summary = FsckSummary::default();
    let started = Instant::now();
    let options = FsckOptions {
        tree: Some((state.size, state.root)),
        more_keys: more_keys.to_vec(),
        ..FsckOptions::default()
    };
    fsck(&fetch, origin, verifier, &options, &mut (), &mut summary)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "refusing to adopt the Tessera log in {}: {}",
                dir.display(),
                verify_failure(&e)
            )
        })?;
    tracing::info!(
        size = state.size,
        checkpoint = summary.checkpoint.as_ref().map_or(0, |c| c.size),
        entries = summary.entries,
        seconds = started.elapsed().as_secs_f64(),
        "adopted the Tessera log: it verifies; appending continues it (tlogd's dedup index is rebuilt from the bundles)"
    );
    Ok(())
}

/// A failed check in one line: a read that failed is said to be one.
pub(crate) fn verify_failure(e: &VerifyError) -> String {
    match e {
        VerifyError::Fetch(m) => format!("could not read the log: {m}"),
        other => other.to_string(),
    }
}
