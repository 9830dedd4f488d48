//! The time-to-integrate clock: an entry's clock stops at the first checkpoint that
//! was fetched and verified after its add was sent and whose tree covers its index.
//! Checking the entry's own bytes and inclusion comes later and never moves it.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Verified checkpoints and the entries none of them covered yet.
pub struct IntegrationClock {
    /// (tree size, when verified), oldest first; both only grow.
    history: VecDeque<(u64, Instant)>,
    /// How long a checkpoint is kept for adds answered late (sent before it was
    /// verified, acknowledged after).
    keep: Duration,
    /// Uncovered entries: index -> when their adds were sent.
    pending: BTreeMap<u64, Vec<Instant>>,
}

impl IntegrationClock {
    /// A clock keeping checkpoints for `keep` (at least the adds' HTTP timeout).
    pub fn new(keep: Duration) -> Self {
        IntegrationClock {
            history: VecDeque::new(),
            keep,
            pending: BTreeMap::new(),
        }
    }

    /// An add of the entry at `index`, sent at `sent`, was acknowledged: its time to
    /// integrate if a checkpoint verified since covers it, else it waits for one.
    pub fn written(&mut self, index: u64, sent: Instant) -> Option<Duration> {
        // In order of time and size: the first verified at or after the send, then the
        // first of those covering the index.
        let after = self.history.partition_point(|(_, at)| *at < sent);
        let covering = self.history.range(after..).find(|(size, _)| *size > index);
        match covering {
            Some((_, at)) => Some(at.duration_since(sent)),
            None => {
                self.pending.entry(index).or_default().push(sent);
                None
            }
        }
    }

    /// A checkpoint of `size` was verified at `at` (after every earlier one): the
    /// times to integrate of the waiting entries it covers go to `out`.
    pub fn verified(&mut self, size: u64, at: Instant, out: &mut Vec<Duration>) {
        let rest = self.pending.split_off(&size);
        let covered = std::mem::replace(&mut self.pending, rest);
        for (index, sent) in covered {
            for t in sent {
                if t <= at {
                    out.push(at.duration_since(t));
                } else {
                    // Sent after this checkpoint was verified (it covered an entry the
                    // log had already: a clock that stops before the start is no
                    // clock): wait for the next one.
                    self.pending.entry(index).or_default().push(t);
                }
            }
        }
        self.history.push_back((size, at));
        while self.history.len() > 1
            && self
                .history
                .front()
                .is_some_and(|(_, t)| at.duration_since(*t) > self.keep)
        {
            self.history.pop_front();
        }
    }

    /// Entries no verified checkpoint has covered yet.
    pub fn waiting(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_clock_stops_at_the_first_covering_checkpoint() {
        let t0 = Instant::now();
        let mut c = IntegrationClock::new(ms(10_000));
        let mut out = Vec::new();
        // Entries 0..3 acknowledged before any checkpoint covers them.
        for i in 0..3 {
            assert_eq!(c.written(i, t0 + ms(i)), None);
        }
        // A checkpoint of size 2 covers entries 0 and 1 only.
        c.verified(2, t0 + ms(500), &mut out);
        assert_eq!(out, vec![ms(500), ms(499)]);
        assert_eq!(c.waiting(), 1);
        out.clear();
        // The next covers entry 2; later checkpoints change nothing for it.
        c.verified(3, t0 + ms(1500), &mut out);
        assert_eq!(out, vec![ms(1498)]);
        out.clear();
        c.verified(10, t0 + ms(2500), &mut out);
        assert!(out.is_empty());
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn a_late_answer_finds_the_checkpoint_verified_before_it_arrived() {
        let t0 = Instant::now();
        let mut c = IntegrationClock::new(ms(10_000));
        let mut out = Vec::new();
        c.verified(5, t0 + ms(100), &mut out);
        c.verified(8, t0 + ms(1100), &mut out);
        c.verified(20, t0 + ms(2100), &mut out);
        // Sent at 50 ms, index 6: the checkpoint at 100 ms does not cover it, the one
        // at 1100 ms does (however late its answer reaches the clock).
        assert_eq!(c.written(6, t0 + ms(50)), Some(ms(1050)));
        // Sent at 1200 ms, index 7: the 1100 ms checkpoint covers it but was verified
        // before the add was sent, so it cannot count; the 2100 ms one does.
        assert_eq!(c.written(7, t0 + ms(1200)), Some(ms(900)));
        // Sent after every checkpoint: waits.
        assert_eq!(c.written(21, t0 + ms(2200)), None);
        assert_eq!(c.waiting(), 1);
    }

    #[test]
    fn old_checkpoints_are_forgotten_but_the_newest_is_kept() {
        let t0 = Instant::now();
        let mut c = IntegrationClock::new(ms(1000));
        let mut out = Vec::new();
        c.verified(5, t0, &mut out);
        c.verified(6, t0 + ms(5000), &mut out);
        assert_eq!(c.history.len(), 1);
        assert_eq!(c.written(3, t0 + ms(4000)), Some(ms(1000)));
    }
}
