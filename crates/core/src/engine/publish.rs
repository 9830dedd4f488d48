//! The publisher (step 6 of the protocol): signs a checkpoint for the latest committed
//! state at most once per checkpoint interval, after the backend's own publication
//! steps, cosigned by the witnesses when the log has any; never for a state that is not
//! durable, never backwards.

use super::*;

impl<S: LogStorage> Log<S> {
    pub(super) async fn run_publisher(self, mut rx: watch::Receiver<TreeState>) {
        let inner = &self.inner;
        let republish = inner.config.republish_interval;
        // When the last checkpoint was published (or the log opened).
        let mut last_published = tokio::time::Instant::now();
        loop {
            let state = *rx.borrow_and_update();
            // The interval runs from the start of a publish, so a slow publish (a
            // backend writing the checkpoint's partial tiles, witnesses answering) does
            // not stretch it.
            let started = tokio::time::Instant::now();
            let stale = self.published_size() != Some(state.size);
            let due = !republish.is_zero() && started >= last_published + republish;
            let mut failed = false;
            if stale || due {
                if self.superseded(state).await || self.publish(state).await {
                    last_published = tokio::time::Instant::now();
                } else {
                    failed = true;
                }
            }
            // Wait for a reason to publish again: the tree grew, the last attempt
            // failed (retry), or it is time to republish an unchanged tree.
            if !failed {
                let republish_at = (!republish.is_zero()).then(|| last_published + republish);
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { break },
                    _ = sleep_until_or_never(republish_at) => {}
                }
            }
            // Rate-limit: at most one checkpoint per interval, but stop waiting as soon
            // as the integrator has drained and dropped its sender, so the final state
            // is published at once.
            let deadline = tokio::time::sleep_until(started + inner.config.checkpoint_interval);
            tokio::pin!(deadline);
            let mut closed = false;
            loop {
                tokio::select! {
                    _ = &mut deadline => break,
                    changed = rx.changed() => if changed.is_err() { closed = true; break },
                }
            }
            if closed {
                break;
            }
        }
        // Sender dropped with the integrator: publish the final state.
        let state = *rx.borrow();
        if self.published_size() != Some(state.size) && !self.superseded(state).await {
            self.publish(state).await;
        }
    }

    /// Whether another frontend of a shared store has already published a checkpoint
    /// larger than `state`: then this frontend neither signs nor asks witnesses to
    /// cosign a stale tree (an idle frontend republishing its old size every
    /// republish interval did), and counts `state` as covered, not as published (no
    /// published-checkpoint metric moves). Unreadable: not known to be superseded.
    pub(super) async fn superseded(&self, state: TreeState) -> bool {
        let storage = &self.inner.storage;
        if !storage.reads_are_committed() {
            return false;
        }
        let Ok(Some(stored)) = storage.read_checkpoint().await else {
            return false;
        };
        self.inner.latest.offer(&stored);
        let larger = crate::checkpoint::signed_size(&stored).is_some_and(|s| s > state.size);
        if larger {
            self.inner
                .published
                .store(state.size + 1, Ordering::Release);
            metrics::counter!("tlogd_checkpoints_superseded_total", "log" => self.inner.config.name.clone()).increment(1);
            tracing::debug!(
                size = state.size,
                "a larger checkpoint is published already; not publishing this one"
            );
        }
        larger
    }

    /// Sign, cosign (if configured) and store a checkpoint of `state`; whether it was
    /// published.
    pub(super) async fn publish(&self, state: TreeState) -> bool {
        let inner = &self.inner;
        let cp = Checkpoint {
            origin: inner.config.origin.clone(),
            size: state.size,
            root: state.root,
            extensions: Vec::new(),
        };
        // Never below the newest entry's timestamp, even if that entry was sequenced by
        // a frontend whose clock runs ahead (docs/seams.md, "Timestamps").
        let timestamp = unix_millis().max(inner.newest_timestamp.load(Ordering::Acquire));
        let signers: Vec<&dyn LogSigner> = inner.config.signers.iter().map(|s| &**s).collect();
        let mut signed = match cp.sign_with(&signers, timestamp) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "signing checkpoint failed");
                return false;
            }
        };
        if let Some(cosigner) = &inner.config.cosigner {
            let prover = StorageProver(&*inner.storage);
            match cosigner.cosign(&cp, &signed, &prover).await {
                Ok(cosigned) => signed = cosigned,
                Err(reason) => {
                    metrics::counter!("tlogd_checkpoints_withheld_total", "log" => self.inner.config.name.clone()).increment(1);
                    tracing::error!(size = state.size, %reason, "checkpoint not published");
                    return false;
                }
            }
        }
        if inner.config.grease {
            signed = grease(signed);
        }
        let backend = inner.storage.backend_name();
        let started = Instant::now();
        match inner.storage.publish_checkpoint(&signed).await {
            Ok(()) => {
                metrics::histogram!("tlogd_storage_op_duration_seconds", "log" => self.inner.config.name.clone(), "backend" => backend, "op" => "publish_checkpoint")
                    .record(started.elapsed().as_secs_f64());
                let previous = inner.published.swap(state.size + 1, Ordering::AcqRel);
                inner.latest.offer(&signed);
                metrics::counter!("tlogd_checkpoints_published_total", "log" => self.inner.config.name.clone()).increment(1);
                metrics::gauge!("tlogd_checkpoint_size", "log" => self.inner.config.name.clone())
                    .set(state.size as f64);
                metrics::gauge!("tlogd_checkpoint_published_timestamp_seconds", "log" => self.inner.config.name.clone()).set(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs_f64())
                        .unwrap_or(0.0),
                );
                if previous == state.size + 1 {
                    tracing::info!(size = state.size, "republished checkpoint");
                } else {
                    tracing::info!(size = state.size, "published checkpoint");
                }
                true
            }
            Err(e) => {
                metrics::counter!("tlogd_storage_errors_total", "log" => self.inner.config.name.clone(), "backend" => backend, "op" => "publish_checkpoint").increment(1);
                tracing::error!(error = %e, size = state.size, "publishing checkpoint failed");
                false
            }
        }
    }
}

/// The name of the grease line's key: under `.invalid` (RFC 2606), never a real key's.
pub const GREASE_NAME: &str = "grease.invalid";

/// `signed` with one more signature line: [`GREASE_NAME`], a random key ID and 32 to
/// 95 random bytes, so that no client can single the line out by its length or key.
/// Its bytes are random whatever the source: without randomness, none is added.
pub(super) fn grease(mut signed: Vec<u8>) -> Vec<u8> {
    use base64::Engine as _;
    let mut raw = [0u8; 4 + 95];
    if getrandom::fill(&mut raw).is_err() {
        return signed;
    }
    let len = 4 + 32 + usize::from(raw[4] % 64);
    let line = format!(
        "\u{2014} {GREASE_NAME} {}\n",
        base64::engine::general_purpose::STANDARD.encode(&raw[..len])
    );
    signed.extend_from_slice(line.as_bytes());
    signed
}

/// Sleep until `at`, or forever when `None`.
pub(super) async fn sleep_until_or_never(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;
    use crate::note::{NoteSigner, generate_key};

    /// A greased checkpoint still opens with the log's key (the line is one of no
    /// known key, which verifiers ignore), carries one line more, and no two greases
    /// are alike.
    #[test]
    fn a_greased_checkpoint_opens_with_the_logs_key() {
        let (skey, _) = generate_key("example.com/grease").unwrap();
        let signer = NoteSigner::from_skey(&skey).unwrap();
        let cp = Checkpoint {
            origin: "example.com/grease".into(),
            size: 7,
            root: [9; 32],
            extensions: Vec::new(),
        };
        let signed = cp.sign(&signer).unwrap();
        let (a, b) = (grease(signed.clone()), grease(signed.clone()));
        assert_ne!(a, b);
        for greased in [&a, &b] {
            assert!(greased.starts_with(&signed));
            let added = std::str::from_utf8(&greased[signed.len()..]).unwrap();
            assert!(
                added.starts_with(&format!("\u{2014} {GREASE_NAME} ")),
                "{added}"
            );
            assert_eq!(added.matches('\n').count(), 1);
            let (opened, _) =
                Checkpoint::open(greased, "example.com/grease", &signer.verifier()).unwrap();
            assert_eq!(opened, cp);
        }
    }
}
