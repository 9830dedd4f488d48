//! Delayed execution of operations, so that a slow operation does not hold up others.
//!
//! fuser hands each request to one of a few event-loop threads and expects the handler to
//! return quickly. An operation with a latency is therefore not slept on in the handler:
//! it is queued here with its deadline, and a small pool of workers runs each job once its
//! deadline has passed. A 10 ms fsync of one file thus overlaps with the operations on
//! other files, as on real storage; what is measured is the log, not the harness.

use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    /// Deadlines with their job ids, earliest first.
    heap: BinaryHeap<std::cmp::Reverse<(Instant, u64)>>,
    jobs: HashMap<u64, Job>,
    next: u64,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    cond: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A job that panicked does not run under this lock, so the data is consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Lets the owner of a mount hurry the queued jobs along (see [`Expediter::expedite`]).
#[derive(Clone)]
pub(crate) struct Expediter(Arc<Shared>);

impl Expediter {
    /// Makes every queued job due now: after a freeze they only fail, and nothing
    /// should wait out a latency to do that.
    pub(crate) fn expedite(&self) {
        let mut q = self.0.lock();
        let now = Instant::now();
        let ids: Vec<u64> = q.heap.drain().map(|r| r.0.1).collect();
        for id in ids {
            q.heap.push(std::cmp::Reverse((now, id)));
        }
        drop(q);
        self.0.cond.notify_all();
    }
}

/// A pool of workers running jobs at their deadlines.
pub(crate) struct Scheduler {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Scheduler {
    /// Starts `workers` threads (at least one).
    pub(crate) fn new(workers: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            cond: Condvar::new(),
        });
        let mut handles = Vec::new();
        for i in 0..workers.max(1) {
            let s = shared.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("faultfs-delay-{i}"))
                    .spawn(move || worker(&s))?,
            );
        }
        Ok(Scheduler {
            shared,
            workers: handles,
        })
    }

    /// A handle to [`Expediter::expedite`] the queue from elsewhere.
    pub(crate) fn expediter(&self) -> Expediter {
        Expediter(self.shared.clone())
    }

    /// Runs `job` on a worker once `delay` has passed.
    pub(crate) fn after(&self, delay: Duration, job: Job) {
        let deadline = Instant::now() + delay;
        let mut q = self.shared.lock();
        if q.stop {
            // Dropping the job drops its reply, which fuser answers with an error.
            return;
        }
        let id = q.next;
        q.next += 1;
        q.jobs.insert(id, job);
        q.heap.push(std::cmp::Reverse((deadline, id)));
        drop(q);
        // Every worker re-checks the earliest deadline; one of them takes the job.
        self.shared.cond.notify_all();
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let jobs = {
            let mut q = self.shared.lock();
            q.stop = true;
            q.heap.clear();
            std::mem::take(&mut q.jobs)
        };
        // Outside the lock: dropping a job replies to the kernel (with an error).
        drop(jobs);
        self.shared.cond.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(s: &Shared) {
    let mut q = s.lock();
    loop {
        if q.stop {
            return;
        }
        let now = Instant::now();
        match q.heap.peek().map(|r| r.0) {
            Some((deadline, id)) if deadline <= now => {
                q.heap.pop();
                let job = q.jobs.remove(&id);
                drop(q);
                if let Some(job) = job {
                    // A panicking job must not take the worker (and every later job) down.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
                q = s.lock();
            }
            Some((deadline, _)) => {
                q = s
                    .cond
                    .wait_timeout(q, deadline - now)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            None => {
                q = s.cond.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn jobs_run_in_deadline_order_and_overlap() {
        let s = Scheduler::new(2).unwrap();
        let (tx, rx) = mpsc::channel();
        let t1 = tx.clone();
        s.after(
            Duration::from_millis(200),
            Box::new(move || t1.send(2).unwrap()),
        );
        let t2 = tx.clone();
        s.after(
            Duration::from_millis(10),
            Box::new(move || t2.send(1).unwrap()),
        );
        let got: Vec<i32> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, vec![1, 2]);
    }
}
