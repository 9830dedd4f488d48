//! Entry bundles (tlog-tiles "Log entries"): each entry is a big-endian `uint16`
//! length followed by that many bytes, with no header; 256 entries per full bundle.

/// Largest entry an entry bundle can hold.
pub const MAX_ENTRY_SIZE: usize = 65535;

/// A malformed entry or bundle.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    /// Entries are 1..=65535 bytes.
    #[error("entry of {0} bytes is outside 1..=65535")]
    BadEntrySize(usize),
    /// The bundle ends inside a length prefix or an entry.
    #[error("entry bundle is truncated at byte {0}")]
    Truncated(usize),
    /// A zero-length entry.
    #[error("entry bundle holds an empty entry at byte {0}")]
    EmptyEntry(usize),
    /// More than 256 entries.
    #[error("entry bundle holds more than 256 entries")]
    TooManyEntries,
}

/// Append one entry in bundle encoding.
pub fn append_entry(buf: &mut Vec<u8>, entry: &[u8]) -> Result<(), BundleError> {
    if entry.is_empty() || entry.len() > MAX_ENTRY_SIZE {
        return Err(BundleError::BadEntrySize(entry.len()));
    }
    buf.extend_from_slice(&(entry.len() as u16).to_be_bytes());
    buf.extend_from_slice(entry);
    Ok(())
}

/// Split a bundle into its entries without copying them.
pub fn parse_bundle(bytes: &[u8]) -> Result<Vec<&[u8]>, BundleError> {
    let mut out = Vec::with_capacity(256);
    let mut pos = 0usize;
    while pos < bytes.len() {
        if out.len() == 256 {
            return Err(BundleError::TooManyEntries);
        }
        let Some(len) = bytes.get(pos..pos + 2) else {
            return Err(BundleError::Truncated(pos));
        };
        let n = u16::from_be_bytes([len[0], len[1]]) as usize;
        if n == 0 {
            return Err(BundleError::EmptyEntry(pos));
        }
        let Some(e) = bytes.get(pos + 2..pos + 2 + n) else {
            return Err(BundleError::Truncated(pos));
        };
        out.push(e);
        pos += 2 + n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let mut b = Vec::new();
        append_entry(&mut b, b"one").unwrap();
        append_entry(&mut b, &[7u8; 65535]).unwrap();
        assert_eq!(
            parse_bundle(&b).unwrap(),
            vec![&b"one"[..], &[7u8; 65535][..]]
        );
        assert_eq!(append_entry(&mut b, b""), Err(BundleError::BadEntrySize(0)));
        assert_eq!(
            append_entry(&mut b, &[0u8; 65536]),
            Err(BundleError::BadEntrySize(65536))
        );
        assert_eq!(parse_bundle(&[0, 3, b'a']), Err(BundleError::Truncated(0)));
        assert_eq!(parse_bundle(&[0]), Err(BundleError::Truncated(0)));
        assert_eq!(parse_bundle(&[0, 0]), Err(BundleError::EmptyEntry(0)));
        let mut many = Vec::new();
        for _ in 0..257 {
            append_entry(&mut many, b"x").unwrap();
        }
        assert_eq!(parse_bundle(&many), Err(BundleError::TooManyEntries));
    }
}
