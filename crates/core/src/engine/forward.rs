//! Forwarding: a frontend that sends its batches to another frontend of the same
//! store to be sequenced there, instead of committing them itself.
//!
//! Frontends sharing a store all take adds, but only one can advance the tree at a
//! time. Taking turns at the sequencer (the object stores' lease, the databases'
//! named lock) keeps the tree whole and shares the store fairly, but caps two busy
//! frontends below one: while one commits, the other's clients wait on their
//! unanswered adds, so the log grows like one frontend with half the clients (measured
//! on MinIO: 59 % of one frontend). A forwarding frontend instead sends each batch, as
//! soon as it is cut, to the *sequencing frontend* named in its configuration, which
//! queues the entries beside its own and commits them in its next batch: one
//! frontend's batches, one frontend's object writes, every frontend's clients served.
//!
//! The protocol, from the forwarding side (the engine's integrator):
//!
//! 1. A batch cut from the queue goes to [`Forwarder::forward`] whole, in a task of
//!    its own (at most [`MAX_FORWARDS_IN_FLIGHT`] at once, so the next batch need not
//!    wait for the previous answer). Only batches holding nothing that was itself
//!    forwarded here are forwarded, so a misconfigured pair cannot bounce entries.
//! 2. The answer gives each entry its index (or why it was refused), exactly what a
//!    local add answers; the batch's adds resolve with it.
//! 3. [`ForwardError::Unsent`] (nothing was queued there, for certain: the connection
//!    was refused, or the sequencing frontend refused the request and said so with
//!    [`REFUSED_MARKER`]; never a bare status, which a response budget, a proxy or a
//!    load balancer can give after the batch was committed: [`classify_answer`]) puts
//!    the batch back at the head of the queue and forwarding pauses for
//!    [`FORWARD_PAUSE`]: this frontend commits it itself, by compare-and-swap, as it
//!    would without forwarding. Put back without the entries a commit found logged
//!    while it was away (in flight as committed, or already indexed): the check
//!    against other writers' entries drops them only from the batches it finds queued.
//! 4. [`ForwardError::Unknown`] (sent, but no answer that tells: a timeout, a cut
//!    connection, any other status) answers the batch's adds [`AddError::Uncertain`]
//!    (503: resubmit): the other frontend may have logged them, so committing them
//!    here could log them twice. Their entries stay in this frontend's in-flight map,
//!    tied to the sequencing frontend: a resubmission of one is only ever forwarded
//!    (the sequencing frontend's index answers it), never committed here; while
//!    forwarding is paused it is answered 503. Forwarding goes on; only a second
//!    unknown in a row (the other frontend hangs) pauses it.
//!
//! With forwarding, the dedup index of the sequencing frontend sees every frontend's
//! entries. While it cannot be reached, each frontend commits and deduplicates on its
//! own, as without forwarding (an entry resubmitted to another frontend than the
//! first time may then be logged again: the known limit of per-frontend indices).
//!
//! The sequencing frontend answers forwarded entries through
//! [`Log::add_forwarded`](super::Log::add_forwarded): validation, dedup, queue
//! limits and durability are those of its own adds.
//!
//! The wire format ([`encode_entries`], [`encode_outcomes`]) is internal to tlogd:
//! a request body is the entries, each as a big-endian `u32` length and the bytes; an
//! answer is one record per entry in the same order: `0` + `u64` index + `u64`
//! timestamp (appended), `1` + the same (a duplicate), or `2` + an error code + `u16`
//! length + message. A timestamp of 0 means "not known there" (a duplicate of an
//! entry logged before: its timestamp is in the log).

use std::time::Duration;

use bytes::Bytes;

use super::cosign::BoxFuture;
use super::{AddError, AddOutcome};

/// Forwarded batches awaiting their answer at once, per log.
pub const MAX_FORWARDS_IN_FLIGHT: usize = 8;
/// How long a log commits its batches itself after a forward failed.
pub const FORWARD_PAUSE: Duration = Duration::from_secs(5);

/// Why a forward did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// Nothing of the batch was queued at the sequencing frontend, for certain: the
    /// connection could not be made, or the sequencing frontend itself refused the
    /// request before queueing any entry and said so ([`REFUSED_MARKER`]). Only this
    /// lets the forwarding frontend commit the batch itself.
    #[error("forward not sent: {0}")]
    Unsent(String),
    /// Sent, and no answer that tells what became of the entries: a timeout, a reset,
    /// or any status without [`REFUSED_MARKER`] (a response budget, a proxy or a load
    /// balancer can answer 503 after the batch was delivered and committed). The
    /// entries may be logged there.
    #[error("forward unanswered: {0}")]
    Unknown(String),
}

/// How the body of the sequencing frontend's answer starts when it refused a forward
/// before queueing any of its entries (a wrong token, another log's origin, a bad
/// body, its forward slots full): the one answer besides a refused connection that
/// lets the forwarding frontend commit the batch itself. A status alone never does:
/// a response budget, a proxy or a load balancer can produce any of them.
pub const REFUSED_MARKER: &str = "tlogd-forward-refused: ";

/// The query parameter naming the log a forward is for (its origin, percent-encoded):
/// the sequencing frontend refuses a forward for another log ([`REFUSED_MARKER`]), so
/// a `forward.to` naming the wrong log of a multi-log daemon logs nothing there.
pub const ORIGIN_PARAM: &str = "origin";

/// Whether an answer's body says the forward was refused before queueing
/// ([`REFUSED_MARKER`]).
pub fn is_refusal(body: &[u8]) -> bool {
    body.starts_with(REFUSED_MARKER.as_bytes())
}

/// How a forwarding frontend reads the sequencing frontend's HTTP answer to a forward
/// of `n` entries: `200` is one outcome per entry; a refusal whose body carries
/// [`REFUSED_MARKER`] ([`is_refusal`]) is [`ForwardError::Unsent`]; every other answer
/// is [`ForwardError::Unknown`], since it may come after the entries were committed.
pub fn classify_answer(
    status: u16,
    refused_before_queueing: bool,
    body: &[u8],
    n: usize,
) -> Result<Vec<ForwardedOutcome>, ForwardError> {
    let why = || {
        format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
        )
    };
    match status {
        200 => decode_outcomes(body, n).map_err(|e| ForwardError::Unknown(e.to_string())),
        _ if refused_before_queueing => Err(ForwardError::Unsent(why())),
        _ => Err(ForwardError::Unknown(why())),
    }
}

/// What one forwarded entry became, as the sequencing frontend answered it.
pub type ForwardedOutcome = Result<AddOutcome, AddError>;

/// Sends batches to the sequencing frontend (the daemon's HTTP client). The answer
/// holds one outcome per entry, in order.
pub trait Forwarder: Send + Sync + 'static {
    /// Where batches go, for logs ("http://10.0.0.1:8080").
    fn target(&self) -> &str;
    /// Forward `entries`; on success, one outcome per entry, in order.
    fn forward(
        &self,
        entries: Vec<Bytes>,
    ) -> BoxFuture<'_, Result<Vec<ForwardedOutcome>, ForwardError>>;
}

/// Why a forwarded body or answer cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed forward {what}: {why}")]
pub struct WireError {
    what: &'static str,
    why: String,
}

fn wire(what: &'static str, why: impl Into<String>) -> WireError {
    WireError {
        what,
        why: why.into(),
    }
}

/// A forward request's body: each entry as a big-endian `u32` length and its bytes.
pub fn encode_entries(entries: &[Bytes]) -> Vec<u8> {
    let len = entries.iter().map(|e| 4 + e.len()).sum();
    let mut out = Vec::with_capacity(len);
    for e in entries {
        out.extend_from_slice(&(e.len() as u32).to_be_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// The entries of a forward request's body, at most `max_entries` of them, each
/// sharing `body`'s buffer.
pub fn decode_entries(body: &Bytes, max_entries: usize) -> Result<Vec<Bytes>, WireError> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        if entries.len() == max_entries {
            return Err(wire("request", format!("more than {max_entries} entries")));
        }
        let Some(len) = body.get(at..at + 4) else {
            return Err(wire("request", "truncated entry length"));
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        at += 4;
        if body.len() - at < len {
            return Err(wire("request", "truncated entry"));
        }
        entries.push(body.slice(at..at + len));
        at += len;
    }
    Ok(entries)
}

// Error codes of an answer record; a code this build does not know reads as Internal.
const E_EMPTY: u8 = 1;
const E_TOO_LARGE: u8 = 2;
const E_REJECTED: u8 = 3;
const E_QUEUE_FULL: u8 = 4;
const E_DEDUP_LAG: u8 = 5;
const E_SHUTTING_DOWN: u8 = 6;
const E_FROZEN: u8 = 7;
const E_STORAGE: u8 = 8;
const E_WRITES_REFUSED: u8 = 9;
const E_UNCERTAIN: u8 = 10;
const E_INTERNAL: u8 = 11;

/// A forward answer: one record per outcome, in order.
pub fn encode_outcomes(outcomes: &[ForwardedOutcome]) -> Vec<u8> {
    let mut out = Vec::with_capacity(outcomes.len() * 17);
    for o in outcomes {
        match o {
            Ok(AddOutcome {
                index,
                duplicate,
                timestamp,
            }) => {
                out.push(u8::from(*duplicate));
                out.extend_from_slice(&index.to_be_bytes());
                out.extend_from_slice(&timestamp.unwrap_or(0).to_be_bytes());
            }
            Err(e) => {
                let (code, text) = match e {
                    AddError::Empty => (E_EMPTY, String::new()),
                    AddError::TooLarge { size, max } => (E_TOO_LARGE, format!("{size} {max}")),
                    AddError::Rejected(why) => (E_REJECTED, why.clone()),
                    AddError::QueueFull => (E_QUEUE_FULL, String::new()),
                    AddError::DedupLag => (E_DEDUP_LAG, String::new()),
                    AddError::ShuttingDown => (E_SHUTTING_DOWN, String::new()),
                    AddError::Frozen => (E_FROZEN, String::new()),
                    AddError::Storage(why) => (E_STORAGE, why.clone()),
                    AddError::WritesRefused => (E_WRITES_REFUSED, String::new()),
                    AddError::Uncertain => (E_UNCERTAIN, String::new()),
                    AddError::Internal(why) => (E_INTERNAL, why.clone()),
                };
                // Messages are one line of a few hundred bytes; cut, never fail.
                let mut end = text.len().min(1024);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                out.push(2);
                out.push(code);
                out.extend_from_slice(&(end as u16).to_be_bytes());
                out.extend_from_slice(&text.as_bytes()[..end]);
            }
        }
    }
    out
}

/// The outcomes of a forward answer, which must hold exactly `n`.
pub fn decode_outcomes(body: &[u8], n: usize) -> Result<Vec<ForwardedOutcome>, WireError> {
    let mut outcomes = Vec::with_capacity(n);
    let mut at = 0usize;
    let take = |at: &mut usize, len: usize| -> Result<&[u8], WireError> {
        let s = body
            .get(*at..*at + len)
            .ok_or_else(|| wire("answer", "truncated record"))?;
        *at += len;
        Ok(s)
    };
    while at < body.len() {
        let tag = take(&mut at, 1)?[0];
        let outcome = match tag {
            0 | 1 => {
                let mut index = [0u8; 8];
                index.copy_from_slice(take(&mut at, 8)?);
                let mut timestamp = [0u8; 8];
                timestamp.copy_from_slice(take(&mut at, 8)?);
                let timestamp = u64::from_be_bytes(timestamp);
                Ok(AddOutcome {
                    index: u64::from_be_bytes(index),
                    duplicate: tag == 1,
                    timestamp: (timestamp != 0).then_some(timestamp),
                })
            }
            2 => {
                let code = take(&mut at, 1)?[0];
                let len = take(&mut at, 2)?;
                let len = u16::from_be_bytes([len[0], len[1]]) as usize;
                let text = String::from_utf8_lossy(take(&mut at, len)?).into_owned();
                Err(match code {
                    E_EMPTY => AddError::Empty,
                    E_TOO_LARGE => {
                        let mut it = text.split(' ').map(|n| n.parse().unwrap_or(0));
                        AddError::TooLarge {
                            size: it.next().unwrap_or(0),
                            max: it.next().unwrap_or(0),
                        }
                    }
                    E_REJECTED => AddError::Rejected(text),
                    E_QUEUE_FULL => AddError::QueueFull,
                    E_DEDUP_LAG => AddError::DedupLag,
                    E_SHUTTING_DOWN => AddError::ShuttingDown,
                    E_FROZEN => AddError::Frozen,
                    E_STORAGE => AddError::Storage(text),
                    E_WRITES_REFUSED => AddError::WritesRefused,
                    E_UNCERTAIN => AddError::Uncertain,
                    _ => AddError::Internal(text),
                })
            }
            other => return Err(wire("answer", format!("unknown record tag {other}"))),
        };
        outcomes.push(outcome);
    }
    if outcomes.len() != n {
        return Err(wire(
            "answer",
            format!("{} outcomes for {n} entries", outcomes.len()),
        ));
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_bad_bodies_are_refused() {
        let entries = vec![
            Bytes::from_static(b"one"),
            Bytes::from(vec![7u8; 70_000]),
            Bytes::from_static(b"x"),
        ];
        let body = Bytes::from(encode_entries(&entries));
        assert_eq!(decode_entries(&body, 3), Ok(entries.clone()));
        assert!(decode_entries(&body, 2).is_err(), "over the entry limit");
        assert!(decode_entries(&body.slice(..body.len() - 1), 3).is_err());
        assert!(decode_entries(&body.slice(..2), 3).is_err());
        assert_eq!(decode_entries(&Bytes::new(), 3), Ok(vec![]));
    }

    #[test]
    fn outcomes_round_trip() {
        let outcomes: Vec<ForwardedOutcome> = vec![
            Ok(AddOutcome {
                index: 5,
                duplicate: false,
                timestamp: Some(1_767_139_200_000),
            }),
            Ok(AddOutcome::duplicate(u64::MAX)),
            Err(AddError::TooLarge {
                size: 70_000,
                max: 65_535,
            }),
            Err(AddError::Rejected("not a chain".into())),
            Err(AddError::QueueFull),
            Err(AddError::Uncertain),
            Err(AddError::Storage("é".repeat(600))),
        ];
        let body = encode_outcomes(&outcomes);
        let back = decode_outcomes(&body, outcomes.len()).expect("decodes");
        assert_eq!(back[..6], outcomes[..6]);
        // Long messages are cut at a character boundary, never split one.
        match &back[6] {
            Err(AddError::Storage(s)) => assert_eq!(s, &"é".repeat(512)),
            other => panic!("{other:?}"),
        }
        assert!(decode_outcomes(&body, outcomes.len() + 1).is_err());
        assert!(decode_outcomes(&body[..body.len() - 1], outcomes.len()).is_err());
        assert!(decode_outcomes(&[9], 1).is_err());
    }
}
