//! The threads that validate a CT log's costly chains (#62): a dedicated, bounded pool,
//! never tokio's blocking pool (which POSIX tile reads and commits use), with a queue
//! that sheds when full and a per-address share of it.
//!
//! Most chains never come here: one whose few signature checks are cheap is validated
//! on the request's thread (`tlogd_ct::chain::validate_if_cheap`), and a chain that
//! reaches no accepted root, or holds a key no root program allows, is refused before
//! any signature is checked. What comes here is what costs a millisecond or more
//! (P-384 and P-521 links, RSA keys aws-lc-rs does not take): a client sending only
//! such chains gets at most its share of the queue, the rest of the queue stays for
//! others, and a full queue answers `503` + `Retry-After` at once instead of growing
//! threads and memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Why a job was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// The queue is full.
    Full,
    /// This client address holds its share of the queue.
    PerAddress,
}

impl Shed {
    /// The metric label and the answer's words.
    pub fn reason(self) -> (&'static str, &'static str) {
        match self {
            Shed::Full => (
                "full",
                "too many chains waiting for validation; retry later",
            ),
            Shed::PerAddress => (
                "per_address",
                "too many of this address's chains waiting for validation; retry later",
            ),
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Jobs queued or running, by client address; an entry is removed at zero.
type HeldByAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A fixed set of threads taking jobs from a bounded queue.
pub struct ValidationPool {
    jobs: SyncSender<Job>,
    /// By client address, grouped as the listener groups them.
    held: HeldByAddress,
    per_address: usize,
}

impl ValidationPool {
    /// `threads` workers (at least one), at most `queue` jobs waiting (at least one),
    /// at most `per_address` (at least one) queued or running for one client address.
    pub fn new(
        name: &str,
        threads: usize,
        queue: usize,
        per_address: usize,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = std::sync::mpsc::sync_channel::<Job>(queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("{name}-validate-{i}"))
                .spawn(move || work(&rx))?;
        }
        Ok(ValidationPool {
            jobs,
            held: Arc::default(),
            per_address: per_address.max(1),
        })
    }

    /// Runs `f` on a worker and resolves to its result; `client` is the request's
    /// address (`None`: a trusted proxy's, not counted per address). Refused at once
    /// when the queue or the client's share is full.
    pub async fn run<R, F>(&self, client: Option<IpAddr>, f: F) -> Result<R, Shed>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let slot = self.take(client)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _slot = slot;
            let _ = tx.send(f());
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            // The job (and its slot with it) is dropped.
            Err(TrySendError::Full(_)) => return Err(Shed::Full),
            Err(TrySendError::Disconnected(_)) => return Err(Shed::Full),
        }
        // A worker that panics drops the sender: the queue's answer, not a hang.
        rx.await.map_err(|_| Shed::Full)
    }

    fn take(&self, client: Option<IpAddr>) -> Result<Slot, Shed> {
        let Some(ip) = client else {
            return Ok(Slot(None));
        };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(ip).or_insert(0);
        if *n >= self.per_address {
            return Err(Shed::PerAddress);
        }
        *n += 1;
        Ok(Slot(Some((self.held.clone(), ip))))
    }
}

/// A client's place in the queue, given back when the job is done or dropped.
struct Slot(Option<(HeldByAddress, IpAddr)>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((held, ip)) = self.0.take() {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = held.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    held.remove(&ip);
                }
            }
        }
    }
}

/// A worker: runs jobs until the pool is dropped.
fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv()
        };
        match job {
            // A panicking job must not take the worker with it.
            Ok(job) => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, n)))
    }

    /// One worker, a queue of two, a share of two: a client holding its share is
    /// refused, another still gets in until the queue is full, a trusted proxy's job
    /// counts against the queue only; once the work is done everyone gets in again.
    #[tokio::test]
    async fn the_queue_sheds_when_full_and_each_address_gets_its_share() {
        let pool = Arc::new(ValidationPool::new("test", 1, 2, 2).unwrap());
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let blocked = |pool: &Arc<ValidationPool>, client| {
            let pool = pool.clone();
            let release_rx = release_rx.clone();
            tokio::spawn(async move {
                pool.run(client, move || {
                    let _ = release_rx.lock().unwrap().recv();
                })
                .await
            })
        };
        // A's first runs (the worker takes it), its second waits in the queue.
        let a1 = blocked(&pool, ip(1));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let a2 = blocked(&pool, ip(1));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(pool.run(ip(1), || ()).await, Err(Shed::PerAddress));
        // B fills the queue; then C, and a trusted proxy, find it full.
        let b1 = blocked(&pool, ip(2));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(pool.run(ip(3), || ()).await, Err(Shed::Full));
        assert_eq!(pool.run(None, || ()).await, Err(Shed::Full));
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        for j in [a1, a2, b1] {
            assert_eq!(j.await.unwrap(), Ok(()));
        }
        assert_eq!(pool.run(ip(1), || 7).await, Ok(7));
        assert_eq!(pool.run(None, || 8).await, Ok(8));
        assert!(
            pool.held.lock().unwrap().is_empty(),
            "every slot given back"
        );
    }

    /// A job that panics answers as shed and leaves the worker working.
    #[tokio::test]
    async fn a_panicking_job_does_not_take_the_worker() {
        let pool = ValidationPool::new("test", 1, 4, 4).unwrap();
        assert_eq!(
            pool.run(ip(1), || panic!("boom")).await,
            Err::<(), _>(Shed::Full)
        );
        assert_eq!(pool.run(ip(1), || 1).await, Ok(1));
    }
}
