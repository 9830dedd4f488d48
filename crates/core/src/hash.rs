//! RFC 6962 hashing (tlog-tiles "Merkle Tree": the log is an RFC 6962 Merkle tree).

use sha2::{Digest, Sha256};

/// Size of a SHA-256 hash.
pub const HASH_SIZE: usize = 32;

/// A SHA-256 hash: a leaf hash, an interior node hash or a root.
pub type Hash = [u8; HASH_SIZE];

/// RFC 6962 leaf hash: `SHA-256(0x00 || entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(entry);
    h.finalize().into()
}

/// RFC 6962 interior node hash: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// Root of the empty tree: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_root_is_sha256_of_nothing() {
        // tessera-testdata-log/checkpoint.0 carries this root.
        assert_eq!(
            empty_root()[..4],
            [0xe3, 0xb0, 0xc4, 0x42],
            "SHA-256(\"\") starts e3b0c442"
        );
    }

    #[test]
    fn leaf_and_node_are_domain_separated() {
        let l = leaf_hash(b"");
        assert_ne!(l, empty_root());
        assert_ne!(node_hash(&l, &l), leaf_hash(&[l, l].concat()));
    }
}
