//! The client of a request as its listener saw it (`serve/server.rs` puts a [`Client`]
//! in every request's extensions): its address as per-address limits count it, and the
//! budget of request-body bytes the listener lets its clients hold while they are read
//! (#62). Below the router and the route families, which read it.
//!
//! Why bodies are budgeted: a handler reads a body whole before it can act on it (an
//! entry, a CT chain of up to 512 KiB), and HTTP/2 hands the client more window as the
//! body is read, so without a bound a few connections of many streams, each sending
//! most of a large body and never finishing, would make the daemon hold hundreds of
//! MiB for the body timeout and then again. A body's first [`FREE_BODY_BYTES`] take
//! nothing (the hot path: an add of a small entry touches no shared counter); beyond
//! them each piece read is taken from the listener's budget and the client's share of
//! it before the next is read. A body that does not fit waits a moment for room
//! ([`BODY_ROOM_WAIT`]) without being read (its HTTP/2 window stays shut, so its client
//! can send no more and a flood of them costs neither memory nor CPU), then is answered
//! `503` (its stream reset). Refusing at once would invite the client straight back
//! with the next body: measured, that made a flood cost the other logs 40 % of their
//! appends (`benches/hostile.sh`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long a body waits for room in its [`BodyBudget`] before its `503`.
pub const BODY_ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The bytes of a request body read before any is taken from a [`BodyBudget`].
pub const FREE_BODY_BYTES: u64 = 4 << 10;

/// The client a request came from (a request extension).
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// Its address as per-address limits count it (an IPv6 address cut to
    /// `http.ipv6_prefix_len`); `None` for a trusted proxy (`http.trusted_proxies`),
    /// whose requests are many clients' and are not counted per address.
    pub addr: Option<IpAddr>,
    /// The listener's request-body budget; `None` where bodies are not budgeted.
    pub bodies: Option<Arc<BodyBudget>>,
}

/// Request-body bytes being read at once on one listener, and by one client address
/// (`http.max_request_bytes_in_flight`, `http.max_request_bytes_per_ip`).
#[derive(Debug)]
pub struct BodyBudget {
    used: AtomicU64,
    limit: u64,
    per_ip_limit: u64,
    /// Bytes held by client address; an entry is removed at zero.
    per_ip: Mutex<HashMap<IpAddr, u64>>,
    /// `tlogd_http_request_bodies_shed_total{listener}`.
    shed: metrics::Counter,
    /// `tlogd_http_request_bytes_in_flight{listener}`.
    gauge: metrics::Gauge,
    /// Told whenever bytes are given back: bodies waiting for room look again.
    freed: tokio::sync::Notify,
}

impl BodyBudget {
    /// A budget of `limit` bytes, of which one address holds at most `per_ip_limit`.
    pub fn new(listener: &'static str, limit: u64, per_ip_limit: u64) -> Self {
        BodyBudget {
            used: AtomicU64::new(0),
            limit,
            per_ip_limit,
            per_ip: Mutex::new(HashMap::new()),
            shed: metrics::counter!("tlogd_http_request_bodies_shed_total", "listener" => listener),
            gauge: metrics::gauge!("tlogd_http_request_bytes_in_flight", "listener" => listener),
            freed: tokio::sync::Notify::new(),
        }
    }

    /// Bytes held now (all clients).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// What one body being read holds of its [`BodyBudget`]; given back when dropped.
///
/// Borrows its client's budget rather than sharing it: a small body (the hot path) then
/// touches no shared cache line at all, not even the budget's reference count.
pub struct BodyHeld<'a> {
    budget: Option<&'a BodyBudget>,
    addr: Option<IpAddr>,
    held: u64,
}

impl<'a> BodyHeld<'a> {
    /// Nothing held yet, for a body of `client` (none: not budgeted).
    pub fn new(client: Option<&'a Client>) -> Self {
        BodyHeld {
            budget: client.and_then(|c| c.bodies.as_deref()),
            addr: client.and_then(|c| c.addr),
            held: 0,
        }
    }

    /// [`BodyHeld::grow_to`], waiting up to `patience` for room (the next piece of the
    /// body is not read meanwhile, so an HTTP/2 client's window stays shut: it cannot
    /// send more, and costs nothing while it waits). `false` when there is still no
    /// room then.
    pub async fn grow_to_within(&mut self, total: u64, patience: std::time::Duration) -> bool {
        // Nearly always it fits at once (a small body takes nothing): no clock read, no
        // waiter registered on the listener-wide `freed` (whose lock every add would
        // otherwise take twice).
        if self.grow_to(total) {
            return true;
        }
        let Some(b) = self.budget else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let freed = b.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if self.grow_to(total) {
                return true;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                b.shed.increment(1);
                return false;
            }
        }
    }

    /// The body has `total` bytes read: hold what is beyond [`FREE_BODY_BYTES`].
    /// `false` (and nothing more held) when that does not fit in the listener's budget
    /// or the client's share.
    pub fn grow_to(&mut self, total: u64) -> bool {
        let Some(b) = self.budget else {
            return true;
        };
        let want = total.saturating_sub(FREE_BODY_BYTES);
        let Some(more) = want.checked_sub(self.held).filter(|&m| m > 0) else {
            return true;
        };
        if b.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more).filter(|&t| t <= b.limit)
            })
            .is_err()
        {
            return false;
        }
        if let Some(ip) = self.addr {
            let mut per_ip = b.per_ip.lock().unwrap_or_else(|p| p.into_inner());
            let mine = per_ip.entry(ip).or_insert(0);
            match mine.checked_add(more).filter(|&t| t <= b.per_ip_limit) {
                Some(t) => *mine = t,
                None => {
                    if *mine == 0 {
                        per_ip.remove(&ip);
                    }
                    drop(per_ip);
                    b.used.fetch_sub(more, Ordering::AcqRel);
                    return false;
                }
            }
        }
        b.gauge.increment(more as f64);
        self.held += more;
        true
    }
}

impl Drop for BodyHeld<'_> {
    fn drop(&mut self) {
        let (Some(b), n) = (self.budget, self.held) else {
            return;
        };
        if n == 0 {
            return;
        }
        b.used.fetch_sub(n, Ordering::AcqRel);
        b.gauge.decrement(n as f64);
        if let Some(ip) = self.addr {
            let mut per_ip = b.per_ip.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mine) = per_ip.get_mut(&ip) {
                *mine = mine.saturating_sub(n);
                if *mine == 0 {
                    per_ip.remove(&ip);
                }
            }
        }
        b.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: u8, budget: &Arc<BodyBudget>) -> Client {
        Client {
            addr: Some(IpAddr::from([192, 0, 2, n])),
            bodies: Some(budget.clone()),
        }
    }

    /// The first 4 KiB are free; beyond them an address holds at most its share and
    /// the listener at most its budget; what is held comes back when dropped.
    #[test]
    fn bodies_hold_their_bytes_within_the_share_and_the_budget() {
        let b = Arc::new(BodyBudget::new("test", 100_000, 60_000));
        let (a, c) = (client(1, &b), client(2, &b));
        let mut small = BodyHeld::new(Some(&a));
        assert!(small.grow_to(FREE_BODY_BYTES));
        assert_eq!(b.used(), 0, "the first bytes are free");
        let mut a1 = BodyHeld::new(Some(&a));
        assert!(a1.grow_to(FREE_BODY_BYTES + 50_000));
        let mut a2 = BodyHeld::new(Some(&a));
        assert!(
            !a2.grow_to(FREE_BODY_BYTES + 20_000),
            "over the address's share"
        );
        assert_eq!(b.used(), 50_000);
        let mut c1 = BodyHeld::new(Some(&c));
        assert!(c1.grow_to(FREE_BODY_BYTES + 50_000));
        let mut c2 = BodyHeld::new(Some(&c));
        assert!(
            !c2.grow_to(FREE_BODY_BYTES + 5_000),
            "over the listener's budget"
        );
        // A trusted proxy counts against the budget only.
        let proxy = Client {
            addr: None,
            bodies: Some(b.clone()),
        };
        let mut p = BodyHeld::new(Some(&proxy));
        assert!(!p.grow_to(FREE_BODY_BYTES + 1_000));
        drop((a1, c1));
        assert_eq!(b.used(), 0);
        assert!(p.grow_to(FREE_BODY_BYTES + 90_000));
        drop(p);
        assert_eq!(b.used(), 0);
        assert!(b.per_ip.lock().unwrap().is_empty());
        // Not budgeted: anything goes.
        assert!(BodyHeld::new(None).grow_to(u64::MAX));
    }
}
