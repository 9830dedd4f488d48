//! Keys for the examples: uniform 32-byte values, spread like SHA-256 output (what is
//! measured is the index, not a hash function).

/// The `i`-th key.
pub fn hash(i: u64) -> [u8; 32] {
    let mut h = [0u8; 32];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xdead_beef;
    for chunk in h.chunks_mut(8) {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        chunk.copy_from_slice(&x.to_be_bytes());
    }
    h
}
