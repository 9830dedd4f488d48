//! [`YieldFirst`]: drive an HTTP/2 connection so that what many streams queued leaves
//! in one write.
//!
//! Over HTTP/2 each stream is a task of its own (hyper spawns one per request on the
//! server; the loadgen's writers are tasks), and each wakes the connection's task when
//! it queues a frame. tokio runs a task woken by a running task next (its "LIFO slot"),
//! so the connection task runs after the *first* stream of a batch, writes that one
//! stream's frames with a system call of its own, and runs again after the next. tlogd
//! answered ~1.5 adds per `writev` that way at 75k adds/s. A connection task that
//! yields once before it polls goes to the back of the run queue, behind the streams
//! woken with it, and then writes all their frames at once (~19 adds per `writev`).
//! Used by tlogd's server for HTTP/2 connections and by [`crate::client`]'s h2c pool.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

/// A future that, each time it is woken, first yields once (wakes itself and returns
/// `Pending`, which puts its task at the back of the run queue) and polls `inner` on the
/// next turn. With [`YieldFirst::only_if`], it yields only while a flag is set.
pub struct YieldFirst<'a, F> {
    inner: F,
    yielded: bool,
    only_if: Option<&'a AtomicBool>,
}

impl<F> YieldFirst<'static, F> {
    /// Yield before every poll of `inner`.
    pub fn new(inner: F) -> Self {
        YieldFirst {
            inner,
            yielded: false,
            only_if: None,
        }
    }
}

impl<'a, F> YieldFirst<'a, F> {
    /// Yield only while `flag` is set (tlogd's server sets it once a connection turns
    /// out to be HTTP/2: an HTTP/1.1 connection has one answer to write at a time).
    pub fn only_if(self, flag: &'a AtomicBool) -> YieldFirst<'a, F> {
        YieldFirst {
            inner: self.inner,
            yielded: self.yielded,
            only_if: Some(flag),
        }
    }
}

impl<F: Future + Unpin> Future for YieldFirst<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let wanted = this.only_if.is_none_or(|f| f.load(Ordering::Relaxed));
        if wanted && !this.yielded {
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.yielded = false;
        Pin::new(&mut this.inner).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::task::Waker;

    use super::*;

    /// The scenario of the module's doc: a "connection" waiting to be woken, then four
    /// "streams" woken at once that each log themselves and wake it. Returns the log.
    fn run(yield_first: bool, flag: bool) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .expect("a runtime");
        let log = Arc::new(Mutex::new(Vec::new()));
        let conn_waker: Arc<Mutex<Option<Waker>>> = Arc::default();
        let done = Arc::new(AtomicBool::new(false));
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(flag)));
        rt.block_on(async {
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
            let mut ready_tx = Some(ready_tx);
            let inner = {
                let (log, conn_waker, done) = (log.clone(), conn_waker.clone(), done.clone());
                std::future::poll_fn(move |cx| {
                    *conn_waker.lock().expect("lock") = Some(cx.waker().clone());
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                        return Poll::Pending;
                    }
                    log.lock().expect("lock").push("conn".to_string());
                    if done.load(Ordering::Relaxed) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
            };
            let conn = if yield_first {
                tokio::spawn(YieldFirst::new(inner).only_if(flag))
            } else {
                tokio::spawn(inner)
            };
            ready_rx.await.expect("the connection was polled");
            let mut senders = Vec::new();
            let mut streams = Vec::new();
            for i in 0..4 {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                senders.push(tx);
                let (log, conn_waker) = (log.clone(), conn_waker.clone());
                streams.push(tokio::spawn(async move {
                    rx.await.expect("released");
                    log.lock().expect("lock").push(format!("stream {i}"));
                    if let Some(w) = conn_waker.lock().expect("lock").as_ref() {
                        w.wake_by_ref();
                    }
                }));
            }
            // Let the streams reach their await, then release them from one task (a
            // batch completing), as the engine answers a batch of adds.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tokio::spawn(async move {
                for tx in senders {
                    let _ = tx.send(());
                }
            })
            .await
            .expect("the releasing task");
            for s in streams {
                s.await.expect("a stream");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            done.store(true, Ordering::Relaxed);
            if let Some(w) = conn_waker.lock().expect("lock").as_ref() {
                w.wake_by_ref();
            }
            conn.await.expect("the connection");
        });
        log.lock().expect("lock").clone()
    }

    /// How many times the connection was polled while streams were still to run.
    fn polls_between_streams(log: &[String]) -> usize {
        let last_stream = log.iter().rposition(|e| e.starts_with("stream"));
        let first_stream = log.iter().position(|e| e.starts_with("stream"));
        match (first_stream, last_stream) {
            (Some(a), Some(b)) => log[a..b].iter().filter(|e| *e == "conn").count(),
            _ => usize::MAX,
        }
    }

    #[test]
    fn the_connection_is_polled_once_after_all_the_streams_woken_with_it() {
        let log = run(true, true);
        assert_eq!(log.iter().filter(|e| e.starts_with("stream")).count(), 4);
        assert_eq!(polls_between_streams(&log), 0, "{log:?}");
        // One poll for the four streams' wake-ups, one for the last wake-up.
        assert_eq!(log.iter().filter(|e| *e == "conn").count(), 2, "{log:?}");
    }

    #[test]
    fn without_the_yield_the_connection_runs_between_the_streams() {
        // What the wrapper is for: tokio runs the woken connection before the next
        // stream. (Also the wrapper with its flag off.)
        for log in [run(false, true), run(true, false)] {
            assert!(polls_between_streams(&log) > 0, "{log:?}");
        }
    }
}
