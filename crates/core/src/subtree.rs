//! tlog-cosignature "ML-DSA-44 signed message": the statement a subtree cosignature
//! signs (which subtree of which log, by whom, when), and why one cannot be encoded.
//! Scheme-free: the signed-note core names its error, the ML-DSA-44 scheme
//! ([`crate::mldsa`]) signs and checks it.

use crate::hash::{Hash, empty_root};

/// tlog-cosignature "ML-DSA-44 signed message": the label the message starts with.
pub const LABEL: &[u8; 12] = b"subtree/v1\n\0";
/// Longest cosigner name or log origin, in bytes, the signed message can carry
/// (`opaque cosigner_name<1..2^8-1>`, `opaque log_origin<1..2^8-1>`).
pub const MAX_NAME_LEN: usize = 255;
/// tlog-cosignature "Format": the timestamp "MUST NOT exceed 2^63 - 1".
pub const MAX_TIMESTAMP: u64 = (1 << 63) - 1;

/// Why a `cosigned_message` cannot be encoded (tlog-cosignature "ML-DSA-44 signed
/// message").
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageError {
    /// The cosigner name is empty or longer than [`MAX_NAME_LEN`] bytes.
    #[error("the cosigner name is {0} bytes long; it must be 1 to 255")]
    NameLength(usize),
    /// The log origin is empty or longer than [`MAX_NAME_LEN`] bytes.
    #[error("the log origin is {0} bytes long; it must be 1 to 255")]
    OriginLength(usize),
    /// The timestamp exceeds [`MAX_TIMESTAMP`].
    #[error("timestamp {0} exceeds 2^63 - 1")]
    Timestamp(u64),
    /// "If `start` is not zero, these values MUST be zero": a subtree that does not
    /// start at the first leaf carries no timestamp.
    #[error("a subtree starting at {0} must be signed with timestamp 0")]
    TimestampedSubtree(u64),
    /// `[start, end)` is not a subtree (draft-ietf-plants-merkle-tree-certs §4.1).
    #[error("not a valid subtree: start {start}, end {end}")]
    InvalidSubtree {
        /// First leaf.
        start: u64,
        /// One past the last leaf.
        end: u64,
    },
    /// An empty subtree whose hash is not the empty tree's root, `SHA-256("")`.
    #[error("an empty subtree's hash must be SHA-256 of the empty string")]
    EmptySubtreeHash,
}

/// Whether `[start, end)` is a valid subtree (draft-ietf-plants-merkle-tree-certs §4.1,
/// "Definition of a Subtree"): `start < end` and `start` is a multiple of
/// `BIT_CEIL(end - start)`. An empty range `[x, x)` is valid too, as in torchwood:
/// an empty tree's checkpoint is signed as `[0, 0)`.
pub fn valid_subtree(start: u64, end: u64) -> bool {
    if end < start {
        return false;
    }
    if start == end || start == 0 {
        return true;
    }
    // BIT_CEIL(w) = 2^k with k the bit length of w - 1; `start` is a multiple of it
    // when its k low bits are zero (no 2^k is formed, so nothing overflows).
    let k = u64::BITS - (end - start - 1).leading_zeros();
    start.trailing_zeros() >= k
}

/// tlog-cosignature "ML-DSA-44 signed message": the `cosigned_message` by `cosigner` at
/// `timestamp` (POSIX seconds; 0 makes no statement about time) of the subtree
/// `[start, end)` of the log `origin` whose hash is `hash` (for a checkpoint: start 0,
/// end its size, hash its root). `70 + |cosigner| + |origin|` bytes.
pub fn cosigned_message(
    cosigner: &str,
    timestamp: u64,
    origin: &str,
    start: u64,
    end: u64,
    hash: &Hash,
) -> Result<Vec<u8>, MessageError> {
    if cosigner.is_empty() || cosigner.len() > MAX_NAME_LEN {
        return Err(MessageError::NameLength(cosigner.len()));
    }
    if origin.is_empty() || origin.len() > MAX_NAME_LEN {
        return Err(MessageError::OriginLength(origin.len()));
    }
    if timestamp > MAX_TIMESTAMP {
        return Err(MessageError::Timestamp(timestamp));
    }
    if start != 0 && timestamp != 0 {
        return Err(MessageError::TimestampedSubtree(start));
    }
    if !valid_subtree(start, end) {
        return Err(MessageError::InvalidSubtree { start, end });
    }
    if start == end && *hash != empty_root() {
        return Err(MessageError::EmptySubtreeHash);
    }
    let mut m = Vec::with_capacity(70 + cosigner.len() + origin.len());
    m.extend_from_slice(LABEL);
    // Lengths checked above: both fit in the one-byte length prefix.
    m.push(cosigner.len() as u8);
    m.extend_from_slice(cosigner.as_bytes());
    m.extend_from_slice(&timestamp.to_be_bytes());
    m.push(origin.len() as u8);
    m.extend_from_slice(origin.as_bytes());
    m.extend_from_slice(&start.to_be_bytes());
    m.extend_from_slice(&end.to_be_bytes());
    m.extend_from_slice(hash);
    Ok(m)
}
