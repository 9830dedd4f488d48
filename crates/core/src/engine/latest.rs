//! The latest checkpoint, held in memory for readers.
//!
//! Readers must not reach storage on every `GET /checkpoint`, nor for every path
//! beyond the tree: on a database or a bucket each is a round trip on the same pool or
//! client commits use, and a flood of them starved commits (#35: PostgreSQL appends
//! fell from 41k/s to 1.3k/s under h2load). So the checkpoint is served from here:
//! replaced at once when this frontend publishes (or reads a newer one while deciding
//! whether to publish), and otherwise re-read from storage at most once per
//! `max_age`, by one reader while the others keep being served the copy in hand. The
//! size it names is, with the committed size, how far this frontend knows the tree
//! reaches: paths beyond it are answered without I/O.

use std::sync::RwLock;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::StorageError;
use crate::checkpoint::signed_size;

/// A checkpoint in hand and when it was read or published.
#[derive(Clone)]
struct Held {
    signed: Bytes,
    size: u64,
    at: Instant,
}

/// The latest signed checkpoint known to this process (see the module's doc).
pub(crate) struct LatestCheckpoint {
    held: RwLock<Option<Held>>,
    /// One storage read at a time; readers that find it taken serve the copy in hand.
    reading: tokio::sync::Mutex<()>,
    /// When the latest successful storage read began.
    read_began: std::sync::Mutex<Option<Instant>>,
    max_age: Duration,
}

/// Least time between two storage reads made for [`LatestCheckpoint::read_since`]: a
/// flood of requests for paths beyond the tree costs at most ten reads a second.
pub(crate) const MIN_READ_GAP: Duration = Duration::from_millis(100);

impl LatestCheckpoint {
    pub(crate) fn new(max_age: Duration) -> Self {
        LatestCheckpoint {
            held: RwLock::new(None),
            reading: tokio::sync::Mutex::new(()),
            read_began: std::sync::Mutex::new(None),
            max_age,
        }
    }

    fn held(&self) -> Option<Held> {
        self.held.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The checkpoint in hand, however old.
    pub(crate) fn in_hand(&self) -> Option<Bytes> {
        self.held().map(|h| h.signed)
    }

    /// The size named by the checkpoint in hand (0 with none).
    pub(crate) fn size(&self) -> u64 {
        self.held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |h| h.size)
    }

    /// Take `signed` as the latest, read or published now, unless a larger one is in
    /// hand already (checkpoints of one log only grow; a read that raced a publish of
    /// this process must not take the checkpoint back). The same size replaces it: a
    /// republished checkpoint carries a newer timestamp and fresh cosignatures.
    pub(crate) fn offer(&self, signed: &[u8]) {
        let Some(size) = signed_size(signed) else {
            return;
        };
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(h) if h.size > size => h.at = Instant::now(),
            _ => {
                *held = Some(Held {
                    signed: Bytes::copy_from_slice(signed),
                    size,
                    at: Instant::now(),
                })
            }
        }
    }

    fn read_began(&self) -> Option<Instant> {
        *self.read_began.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make sure storage was read by a read that began at or after `arrival`, so that
    /// whatever checkpoint any frontend had stored by then is in hand: a reader who got
    /// a fresh checkpoint from another frontend and asks this one for a path it covers
    /// is never told `404`. Reads are made one at a time, at least [`MIN_READ_GAP`]
    /// apart; every caller waiting meanwhile is served by the next one. A failed read
    /// leaves the copy in hand as it was.
    pub(crate) async fn read_since<F, Fut>(&self, arrival: Instant, read: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Option<Vec<u8>>, StorageError>>,
    {
        if self.read_began().is_some_and(|b| b >= arrival) {
            return;
        }
        let _reading = self.reading.lock().await;
        let last = self.read_began();
        if last.is_some_and(|b| b >= arrival) {
            return;
        }
        if let Some(next) = last.map(|b| b + MIN_READ_GAP)
            && next > Instant::now()
        {
            tokio::time::sleep_until(next.into()).await;
        }
        let began = Instant::now();
        if let Ok(Some(stored)) = read().await {
            self.offer(&stored);
        }
        *self.read_began.lock().unwrap_or_else(|e| e.into_inner()) = Some(began);
    }

    /// The latest checkpoint: the copy in hand while it is fresh, or while another
    /// reader is reading storage; otherwise read from storage with `read`.
    pub(crate) async fn get<F, Fut>(&self, read: F) -> Result<Option<Bytes>, StorageError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Option<Vec<u8>>, StorageError>>,
    {
        let held = self.held();
        if let Some(h) = &held
            && h.at.elapsed() < self.max_age
        {
            return Ok(Some(h.signed.clone()));
        }
        let _reading = match (self.reading.try_lock(), &held) {
            (Ok(guard), _) => guard,
            // Someone is reading: serve what is in hand meanwhile.
            (Err(_), Some(h)) => return Ok(Some(h.signed.clone())),
            // Nothing in hand yet: wait for that read, then take its result.
            (Err(_), None) => {
                let guard = self.reading.lock().await;
                if let Some(h) = self.held() {
                    return Ok(Some(h.signed));
                }
                guard
            }
        };
        // Read while this reader held the lock: another may have refreshed just before.
        if let Some(h) = self.held()
            && h.at.elapsed() < self.max_age
        {
            return Ok(Some(h.signed));
        }
        let began = Instant::now();
        let result = read().await;
        if result.is_ok() {
            *self.read_began.lock().unwrap_or_else(|e| e.into_inner()) = Some(began);
        }
        match result {
            Ok(Some(stored)) => {
                self.offer(&stored);
                Ok(self.held().map(|h| h.signed))
            }
            // Nothing published yet; a copy in hand (published by this process while
            // storage answered) still counts.
            Ok(None) => Ok(self.held().map(|h| h.signed)),
            Err(e) => match self.held() {
                // Storage failing is no reason to stop serving the last good answer;
                // the next reader tries again.
                Some(h) => {
                    tracing::warn!(error = %e, "re-reading the checkpoint failed; serving the copy in hand");
                    Ok(Some(h.signed))
                }
                None => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cp(size: u64, tag: &str) -> Vec<u8> {
        format!("origin\n{size}\nroot\n\n— {tag}\n").into_bytes()
    }

    #[tokio::test]
    async fn storage_is_read_at_most_once_per_max_age_and_never_takes_a_checkpoint_back() {
        let latest = LatestCheckpoint::new(Duration::from_millis(200));
        let reads = AtomicUsize::new(0);
        let stored = std::sync::Mutex::new(cp(5, "a"));
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok(Some(stored.lock().unwrap().clone()))
        };
        for _ in 0..100 {
            assert_eq!(latest.get(read).await.unwrap().unwrap(), cp(5, "a"));
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(latest.size(), 5);
        // Published by this process: served at once, without a read.
        latest.offer(&cp(9, "b"));
        assert_eq!(latest.get(read).await.unwrap().unwrap(), cp(9, "b"));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // Once stale, storage is read again; an older stored one does not win.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(latest.get(read).await.unwrap().unwrap(), cp(9, "b"));
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // A newer stored one (another frontend's) does.
        *stored.lock().unwrap() = cp(12, "c");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(latest.get(read).await.unwrap().unwrap(), cp(12, "c"));
        assert_eq!(latest.size(), 12);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn paths_beyond_the_tree_wait_for_one_read_begun_after_they_arrived() {
        let latest = std::sync::Arc::new(LatestCheckpoint::new(Duration::from_secs(3600)));
        let reads = std::sync::Arc::new(AtomicUsize::new(0));
        latest.offer(&cp(5, "a"));
        // Stored by another frontend before these requests arrive: all see it, by one
        // read (or two: one may have begun before the last of them arrived).
        let arrival = Instant::now();
        let mut waiting = Vec::new();
        for _ in 0..50 {
            let (l, r) = (latest.clone(), reads.clone());
            waiting.push(tokio::spawn(async move {
                l.read_since(arrival, || async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(Some(cp(9, "b")))
                })
                .await;
                l.size()
            }));
        }
        for w in waiting {
            assert_eq!(w.await.unwrap(), 9);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // A request arriving later waits for a new read, at least MIN_READ_GAP after
        // the last one began.
        let later = Instant::now();
        let r = reads.clone();
        latest
            .read_since(later, || async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(Some(cp(12, "c")))
            })
            .await;
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert_eq!(latest.size(), 12);
        assert!(arrival.elapsed() >= MIN_READ_GAP);
    }

    #[tokio::test]
    async fn a_failed_read_serves_the_copy_in_hand_and_reports_without_one() {
        let latest = LatestCheckpoint::new(Duration::ZERO);
        let failing = || async { Err(StorageError::Backend("down".into())) };
        assert!(latest.get(failing).await.is_err());
        latest.offer(&cp(3, "a"));
        assert_eq!(latest.get(failing).await.unwrap().unwrap(), cp(3, "a"));
    }
}
