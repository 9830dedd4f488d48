//! A minimal DER reader and writer for the byte surgery chain validation needs.
//!
//! Chain validation must hash, sign and store certificates exactly as their CA encoded
//! them: the TBSCertificate a precertificate entry carries (RFC 6962 §3.2) is the
//! submitted one with one extension removed (and, for a Precertificate Signing
//! Certificate, the issuer and authority key identifier swapped). Re-encoding through an
//! ASN.1 library could normalise bytes the CA chose; this module only splits TLVs and
//! gives raw slices, and writes the few headers whose lengths change.

use std::fmt;

/// `SEQUENCE` (constructed).
pub(crate) const SEQUENCE: u8 = 0x30;
/// `OBJECT IDENTIFIER`.
pub(crate) const OID: u8 = 0x06;
/// `BOOLEAN`.
pub(crate) const BOOLEAN: u8 = 0x01;
/// `INTEGER`.
pub(crate) const INTEGER: u8 = 0x02;
/// `BIT STRING`.
pub(crate) const BIT_STRING: u8 = 0x03;
/// `OCTET STRING`.
pub(crate) const OCTET_STRING: u8 = 0x04;
/// `[0] EXPLICIT` (a TBSCertificate's version).
pub(crate) const CONTEXT_0: u8 = 0xa0;
/// `[3] EXPLICIT` (a TBSCertificate's extensions).
pub(crate) const CONTEXT_3: u8 = 0xa3;

/// Why bytes are not the DER expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DerError(pub(crate) &'static str);

impl fmt::Display for DerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for DerError {}

/// One tag-length-value element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tlv<'a> {
    /// The identifier octet (only low tag numbers occur in certificates).
    pub(crate) tag: u8,
    /// The whole element: header and contents.
    pub(crate) raw: &'a [u8],
    /// The contents.
    pub(crate) value: &'a [u8],
}

/// Reads the first element of `input`; returns it and what follows it.
///
/// Lengths may be long-form up to 4 bytes (a certificate is far smaller); indefinite
/// lengths (BER) and multi-byte tags are refused. Non-minimal length encodings are
/// accepted: this reader is lax, the signature decides whether the bytes are genuine.
pub(crate) fn read(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), DerError> {
    let (&tag, rest) = input.split_first().ok_or(DerError("truncated element"))?;
    if tag & 0x1f == 0x1f {
        return Err(DerError("a multi-byte tag"));
    }
    let (&first, rest) = rest.split_first().ok_or(DerError("truncated length"))?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 {
            return Err(DerError("an indefinite length"));
        }
        if n > 4 {
            return Err(DerError("a length of more than 4 bytes"));
        }
        if rest.len() < n {
            return Err(DerError("truncated length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(DerError("truncated contents"));
    }
    let header = input.len() - rest.len();
    let (value, after) = rest.split_at(len);
    Ok((
        Tlv {
            tag,
            raw: &input[..header + len],
            value,
        },
        after,
    ))
}

/// Reads `input` as exactly one element with tag `tag`.
pub(crate) fn read_exact(input: &[u8], tag: u8) -> Result<Tlv<'_>, DerError> {
    let (tlv, rest) = read(input)?;
    if tlv.tag != tag {
        return Err(DerError("an unexpected tag"));
    }
    if !rest.is_empty() {
        return Err(DerError("trailing bytes"));
    }
    Ok(tlv)
}

/// Reads the elements of a constructed value one after the other.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// A reader over the contents of a constructed element.
    pub(crate) fn new(contents: &'a [u8]) -> Self {
        Reader(contents)
    }

    /// Whether every element was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next element, or `None` at the end.
    pub(crate) fn next_tlv(&mut self) -> Result<Option<Tlv<'a>>, DerError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let (tlv, rest) = read(self.0)?;
        self.0 = rest;
        Ok(Some(tlv))
    }

    /// The next element, which must have tag `tag`.
    pub(crate) fn expect(&mut self, tag: u8, what: &'static str) -> Result<Tlv<'a>, DerError> {
        match self.next_tlv()? {
            Some(tlv) if tlv.tag == tag => Ok(tlv),
            _ => Err(DerError(what)),
        }
    }

    /// The next element if it has tag `tag` (an OPTIONAL or DEFAULT field).
    pub(crate) fn optional(&mut self, tag: u8) -> Result<Option<Tlv<'a>>, DerError> {
        match self.0.first() {
            Some(&t) if t == tag => self.next_tlv(),
            _ => Ok(None),
        }
    }

    /// Every remaining element.
    pub(crate) fn all(mut self) -> Result<Vec<Tlv<'a>>, DerError> {
        let mut out = Vec::new();
        while let Some(tlv) = self.next_tlv()? {
            out.push(tlv);
        }
        Ok(out)
    }
}

/// Appends a DER header (minimal length encoding) for contents of `len` bytes.
pub(crate) fn write_header(tag: u8, len: usize, out: &mut Vec<u8>) {
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// One element with tag `tag` whose contents are `parts`, concatenated.
pub(crate) fn wrap<T: AsRef<[u8]>>(tag: u8, parts: &[T]) -> Vec<u8> {
    let len = parts.iter().map(|p| p.as_ref().len()).sum();
    let mut out = Vec::with_capacity(len + 6);
    write_header(tag, len, &mut out);
    for p in parts {
        out.extend_from_slice(p.as_ref());
    }
    out
}

/// The dotted-decimal form of an OBJECT IDENTIFIER's contents, or `None` when they are
/// malformed (empty, a truncated arc, or an arc too large for 64 bits).
pub(crate) fn oid_to_string(contents: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc: u64 = 0;
    let mut pending = false;
    for &b in contents {
        if acc > (u64::MAX >> 7) {
            return None;
        }
        acc = (acc << 7) | u64::from(b & 0x7f);
        pending = true;
        if b & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
            pending = false;
        }
    }
    if pending || arcs.is_empty() {
        return None;
    }
    // The first subidentifier packs the first two arcs (X.690 §8.19.4).
    let first = arcs[0];
    let (a, b) = match first {
        0..=39 => (0, first),
        40..=79 => (1, first - 40),
        _ => (2, first - 80),
    };
    let mut s = format!("{a}.{b}");
    for arc in &arcs[1..] {
        s.push('.');
        s.push_str(&arc.to_string());
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_short_and_long_lengths() {
        let (t, rest) = read(&[0x04, 0x02, 0xaa, 0xbb, 0x05]).unwrap();
        assert_eq!(
            (t.tag, t.value, t.raw.len(), rest),
            (4, &[0xaa, 0xbb][..], 4, &[5][..])
        );
        let mut long = vec![0x04, 0x81, 0x80];
        long.extend(std::iter::repeat_n(7u8, 0x80));
        let (t, rest) = read(&long).unwrap();
        assert_eq!((t.value.len(), t.raw.len(), rest.len()), (0x80, 0x83, 0));
        let mut two = vec![0x30, 0x82, 0x01, 0x00];
        two.extend(std::iter::repeat_n(0u8, 0x100));
        assert_eq!(read(&two).unwrap().0.value.len(), 0x100);
    }

    #[test]
    fn refuses_what_is_not_der() {
        assert!(read(&[]).is_err());
        assert!(read(&[0x04]).is_err());
        assert!(read(&[0x04, 0x03, 1, 2]).is_err());
        assert!(read(&[0x30, 0x80, 0, 0]).is_err(), "indefinite length");
        assert!(read(&[0x1f, 0x01, 0x00]).is_err(), "multi-byte tag");
        assert!(read(&[0x04, 0x85, 0, 0, 0, 0, 1, 0]).is_err());
        assert!(read_exact(&[0x05, 0x00, 0x00], 0x05).is_err(), "trailing");
        assert!(read_exact(&[0x05, 0x00], 0x04).is_err(), "tag");
    }

    #[test]
    fn writes_minimal_headers() {
        for len in [0usize, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000] {
            let body = vec![0u8; len];
            let tlv = wrap(SEQUENCE, &[&body]);
            let parsed = read_exact(&tlv, SEQUENCE).unwrap();
            assert_eq!(parsed.value.len(), len);
        }
        assert_eq!(wrap(SEQUENCE, &[[0u8; 0x80]])[..3], [0x30, 0x81, 0x80]);
        assert_eq!(
            wrap(SEQUENCE, &[vec![0u8; 0x100]])[..4],
            [0x30, 0x82, 0x01, 0x00]
        );
    }

    #[test]
    fn oids_print_dotted() {
        assert_eq!(oid_to_string(&[0x55, 0x1d, 0x25]).unwrap(), "2.5.29.37");
        assert_eq!(
            oid_to_string(&[0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x03]).unwrap(),
            "1.3.6.1.4.1.11129.2.4.3"
        );
        assert_eq!(
            oid_to_string(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b]).unwrap(),
            "1.2.840.113549.1.1.11"
        );
        assert!(oid_to_string(&[]).is_none());
        assert!(oid_to_string(&[0x55, 0x9d]).is_none());
    }
}
