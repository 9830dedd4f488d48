//! The TLS presentation language's encodings (RFC 5246 §4) that RFC 6962 uses:
//! big-endian integers and length-prefixed vectors.

use crate::{FormatError, format_error};

/// Reads a structure front to back.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, at: 0, what }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub(crate) fn position(&self) -> usize {
        self.at
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format_error(
                self.what,
                format!(
                    "{n} bytes wanted at offset {}, {} left",
                    self.at,
                    self.bytes.len() - self.at
                ),
            ));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// A big-endian unsigned integer of `n` (1 to 8) bytes.
    pub(crate) fn uint(&mut self, n: usize) -> Result<u64, FormatError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    /// `opaque x<lo..2^(8*len_bytes)-1>`: the bytes after a `len_bytes` length.
    pub(crate) fn vec(&mut self, len_bytes: usize, min: usize) -> Result<&'a [u8], FormatError> {
        let n = self.uint(len_bytes)? as usize;
        if n < min {
            return Err(format_error(
                self.what,
                format!("a vector of {n} bytes, at least {min} required"),
            ));
        }
        self.take(n)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Append `v` as a big-endian integer of `n` bytes.
pub(crate) fn put_uint(out: &mut Vec<u8>, v: u64, n: usize) {
    out.extend_from_slice(&v.to_be_bytes()[8 - n..]);
}

/// Append `bytes` as a vector with a `len_bytes` length prefix.
///
/// # Panics
/// When `bytes` is too long for the prefix: callers check lengths when a structure is
/// built from input ([`crate::leaf::LogEntry::check`]).
pub(crate) fn put_vec(out: &mut Vec<u8>, bytes: &[u8], len_bytes: usize) {
    assert!(
        len_bytes >= 8 || (bytes.len() as u64) < (1u64 << (8 * len_bytes)),
        "a vector of {} bytes does not fit a {len_bytes}-byte length",
        bytes.len()
    );
    put_uint(out, bytes.len() as u64, len_bytes);
    out.extend_from_slice(bytes);
}
