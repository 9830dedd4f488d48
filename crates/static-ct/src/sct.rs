//! The Signed Certificate Timestamp: what its signature covers (RFC 6962 §3.2) and the
//! `leaf_index` extension every static-ct-api log includes ("SCT Extension").

use crate::leaf::TimestampedEntry;
use crate::tls::Reader;
use crate::{FormatError, format_error};

/// static-ct-api `ExtensionType` `leaf_index(0)`.
pub const LEAF_INDEX: u8 = 0;
/// The largest index a `uint40` holds.
pub const MAX_LEAF_INDEX: u64 = (1 << 40) - 1;

/// The `CtExtensions` of a static-ct-api SCT: one `leaf_index` extension, 8 bytes
/// (`00 0005` and the index as a big-endian `uint40`).
///
/// # Panics
/// When `index` exceeds [`MAX_LEAF_INDEX`] (a log of 2^40 entries).
pub fn leaf_index_extension(index: u64) -> [u8; 8] {
    assert!(
        index <= MAX_LEAF_INDEX,
        "leaf index {index} exceeds 40 bits"
    );
    let i = index.to_be_bytes();
    [LEAF_INDEX, 0, 5, i[3], i[4], i[5], i[6], i[7]]
}

/// The `leaf_index` in `extensions` (`CtExtensions`, static-ct-api), if there is one.
/// Extensions of other types are skipped; one type twice is an error (the spec's MUST
/// NOT), as is a `leaf_index` whose data is not 5 bytes.
pub fn parse_leaf_index(extensions: &[u8]) -> Result<Option<u64>, FormatError> {
    let mut r = Reader::new(extensions, "extensions");
    let mut seen = [false; 256];
    let mut index = None;
    while !r.is_empty() {
        let kind = r.uint(1)? as u8;
        let data = r.vec(2, 0)?;
        if std::mem::replace(&mut seen[kind as usize], true) {
            return Err(format_error(
                "extensions",
                format!("extension type {kind} twice"),
            ));
        }
        if kind == LEAF_INDEX {
            if data.len() != 5 {
                return Err(format_error(
                    "extensions",
                    format!("a leaf_index of {} bytes, not 5", data.len()),
                ));
            }
            index = Some(data.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b)));
        }
    }
    Ok(index)
}

/// RFC 6962 §3.2: the bytes an SCT's signature covers: `sct_version` v1 (0),
/// `signature_type` `certificate_timestamp` (0), then the entry as a
/// [`TimestampedEntry`] encodes it (timestamp, entry type, signed entry, extensions).
pub fn signature_input(entry: &TimestampedEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&[0, 0]);
    entry.encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;
    use crate::leaf::LogEntry;

    /// TesseraCT's known answers (its signature tests).
    #[test]
    fn signature_inputs_match_known_answers() {
        let x509 = TimestampedEntry {
            timestamp: 1234,
            entry: LogEntry::X509 {
                certificate: b"certificate".to_vec(),
            },
            extensions: vec![],
        };
        assert_eq!(
            signature_input(&x509),
            hex("00 00 00000000000004d2 0000 00000b 6365727469666963617465 0000")
        );
        let precert = TimestampedEntry {
            timestamp: 1234,
            entry: LogEntry::Precert {
                issuer_key_hash: *b"iamapublickeyshatwofivesixdigest",
                tbs_certificate: b"tbs".to_vec(),
            },
            extensions: vec![],
        };
        assert_eq!(
            signature_input(&precert),
            hex(
                "00 00 00000000000004d2 0001 69616d617075626c69636b657973686174776f66697665736978646967657374 000003 746273 0000"
            )
        );
    }

    #[test]
    fn the_leaf_index_extension_round_trips() {
        assert_eq!(leaf_index_extension(8), hex("0000050000000008")[..]);
        assert_eq!(parse_leaf_index(&leaf_index_extension(8)), Ok(Some(8)));
        let max = leaf_index_extension(MAX_LEAF_INDEX);
        assert_eq!(parse_leaf_index(&max), Ok(Some(MAX_LEAF_INDEX)));
        assert_eq!(parse_leaf_index(&[]), Ok(None));
        // Another extension type is skipped; its order does not matter.
        let mut two = hex("07 0001 ff");
        two.extend_from_slice(&leaf_index_extension(3));
        assert_eq!(parse_leaf_index(&two), Ok(Some(3)));
        let mut twice = leaf_index_extension(1).to_vec();
        twice.extend_from_slice(&leaf_index_extension(2));
        assert!(parse_leaf_index(&twice).is_err());
        assert!(parse_leaf_index(&hex("00 0004 00000001")).is_err());
        assert!(parse_leaf_index(&hex("00 0005 0000")).is_err());
    }
}
