//! What a static-ct-api log stores per entry and hashes into its tree.
//!
//! static-ct-api "Log entries": a data tile is a sequence of `TileLeaf` structures,
//! one per entry, with no length prefixes:
//!
//! ```text
//! struct {
//!     TimestampedEntry timestamped_entry;
//!     select (entry_type) {
//!         case x509_entry: Empty;
//!         case precert_entry: ASN.1Cert pre_certificate;
//!     };
//!     Fingerprint certificate_chain<0..2^16-1>;
//! } TileLeaf;
//! ```
//!
//! RFC 6962 §3.4: the tree's leaves are `MerkleTreeLeaf` structures (version 0,
//! `timestamped_entry` leaf type, the `TimestampedEntry`), hashed as
//! `SHA-256(0x00 || MerkleTreeLeaf)` (RFC 6962 §2.1).

use sha2::{Digest, Sha256};

use crate::tls::{Reader, put_uint, put_vec};
use crate::{FormatError, format_error};

/// RFC 6962 `LogEntryType`: `x509_entry(0)`.
pub const X509_ENTRY: u16 = 0;
/// RFC 6962 `LogEntryType`: `precert_entry(1)`.
pub const PRECERT_ENTRY: u16 = 1;
/// The most bytes an `ASN.1Cert` or `TBSCertificate` can hold (a 24-bit length).
pub const MAX_CERT_LEN: usize = (1 << 24) - 1;

/// RFC 6962 §3.4 `TimestampedEntry.signed_entry`: what the log signs and hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEntry {
    /// An end-entity certificate (`x509_entry`): its DER.
    X509 {
        /// The certificate's DER encoding.
        certificate: Vec<u8>,
    },
    /// A precertificate (`precert_entry`, RFC 6962 §3.2 `PreCert`).
    Precert {
        /// SHA-256 of the issuer's `SubjectPublicKeyInfo`.
        issuer_key_hash: [u8; 32],
        /// The precertificate's TBSCertificate with the poison extension removed (and
        /// the issuer rewritten when a Precertificate Signing Certificate issued it).
        tbs_certificate: Vec<u8>,
    },
}

impl LogEntry {
    /// The `LogEntryType`.
    pub fn entry_type(&self) -> u16 {
        match self {
            LogEntry::X509 { .. } => X509_ENTRY,
            LogEntry::Precert { .. } => PRECERT_ENTRY,
        }
    }

    /// Whether the certificate bytes fit their 24-bit length (and are not empty).
    pub fn check(&self) -> Result<(), FormatError> {
        let len = match self {
            LogEntry::X509 { certificate } => certificate.len(),
            LogEntry::Precert {
                tbs_certificate, ..
            } => tbs_certificate.len(),
        };
        if len == 0 || len > MAX_CERT_LEN {
            return Err(format_error(
                "LogEntry",
                format!("a certificate of {len} bytes"),
            ));
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_uint(out, u64::from(self.entry_type()), 2);
        match self {
            LogEntry::X509 { certificate } => put_vec(out, certificate, 3),
            LogEntry::Precert {
                issuer_key_hash,
                tbs_certificate,
            } => {
                out.extend_from_slice(issuer_key_hash);
                put_vec(out, tbs_certificate, 3);
            }
        }
    }
}

/// RFC 6962 §3.4 `TimestampedEntry`: the entry, when it was logged, and the SCT's
/// extensions (static-ct-api: the `leaf_index` extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampedEntry {
    /// Milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// The certificate or precertificate.
    pub entry: LogEntry,
    /// `CtExtensions`, as serialised (see [`crate::sct::leaf_index_extension`]).
    pub extensions: Vec<u8>,
}

impl TimestampedEntry {
    fn parse(r: &mut Reader<'_>) -> Result<Self, FormatError> {
        let timestamp = r.uint(8)?;
        let entry = match r.uint(2)? as u16 {
            X509_ENTRY => LogEntry::X509 {
                certificate: r.vec(3, 1)?.to_vec(),
            },
            PRECERT_ENTRY => LogEntry::Precert {
                issuer_key_hash: r.array()?,
                tbs_certificate: r.vec(3, 1)?.to_vec(),
            },
            other => {
                return Err(format_error(
                    "TimestampedEntry",
                    format!("entry type {other}"),
                ));
            }
        };
        let extensions = r.vec(2, 0)?.to_vec();
        Ok(TimestampedEntry {
            timestamp,
            entry,
            extensions,
        })
    }

    /// Append the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_uint(out, self.timestamp, 8);
        self.entry.encode(out);
        put_vec(out, &self.extensions, 2);
    }
}

/// RFC 6962 §3.4 `MerkleTreeLeaf` (version `v1`, leaf type `timestamped_entry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MerkleTreeLeaf<'a>(pub &'a TimestampedEntry);

impl MerkleTreeLeaf<'_> {
    /// The encoding: `00 00` (version v1, `timestamped_entry`), then the entry.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + certificate_len(&self.0.entry));
        out.extend_from_slice(&[0, 0]);
        self.0.encode(&mut out);
        out
    }

    /// The tree's leaf hash: `SHA-256(0x00 || MerkleTreeLeaf)` (RFC 6962 §2.1).
    pub fn leaf_hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update([0u8]);
        h.update(self.to_bytes());
        h.finalize().into()
    }
}

fn certificate_len(e: &LogEntry) -> usize {
    match e {
        LogEntry::X509 { certificate } => certificate.len(),
        LogEntry::Precert {
            tbs_certificate, ..
        } => tbs_certificate.len(),
    }
}

/// One entry of a data tile (static-ct-api "Log entries").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileLeaf {
    /// What the tree's leaf hashes.
    pub timestamped_entry: TimestampedEntry,
    /// For a precertificate entry: the precertificate as submitted (RFC 6962 §3.1),
    /// not the TBSCertificate the leaf hashes. `None` for an X.509 entry.
    pub pre_certificate: Option<Vec<u8>>,
    /// SHA-256 of each issuer in the submitted chain, in order (static-ct-api
    /// `certificate_chain`): each is served at `issuer/<hex>`.
    pub certificate_chain: Vec<[u8; 32]>,
}

impl TileLeaf {
    /// Read one `TileLeaf` from the front of `r`.
    fn parse(r: &mut Reader<'_>) -> Result<Self, FormatError> {
        let timestamped_entry = TimestampedEntry::parse(r)?;
        let pre_certificate = match timestamped_entry.entry {
            LogEntry::X509 { .. } => None,
            LogEntry::Precert { .. } => Some(r.vec(3, 1)?.to_vec()),
        };
        let chain = r.vec(2, 0)?;
        if chain.len() % 32 != 0 {
            return Err(format_error(
                "TileLeaf",
                format!(
                    "a certificate chain of {} bytes, not whole fingerprints",
                    chain.len()
                ),
            ));
        }
        let certificate_chain = chain
            .chunks_exact(32)
            .map(|c| {
                let mut f = [0u8; 32];
                f.copy_from_slice(c);
                f
            })
            .collect();
        Ok(TileLeaf {
            timestamped_entry,
            pre_certificate,
            certificate_chain,
        })
    }

    /// Append the encoding, as a data tile holds it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.timestamped_entry.encode(out);
        if let Some(p) = &self.pre_certificate {
            put_vec(out, p, 3);
        }
        let mut chain = Vec::with_capacity(32 * self.certificate_chain.len());
        for f in &self.certificate_chain {
            chain.extend_from_slice(f);
        }
        put_vec(out, &chain, 2);
    }

    /// The tree's leaf for this entry.
    pub fn merkle_tree_leaf(&self) -> MerkleTreeLeaf<'_> {
        MerkleTreeLeaf(&self.timestamped_entry)
    }
}

/// Every `TileLeaf` of a data tile (full or partial), in order.
pub fn parse_data_tile(tile: &[u8]) -> Result<Vec<TileLeaf>, FormatError> {
    Ok(walk_data_tile(tile)?
        .into_iter()
        .map(|(_, leaf)| leaf)
        .collect())
}

/// Each `TileLeaf` of a data tile as its bytes in `tile`, with its timestamp; every
/// leaf is parsed on the way, so a malformed tile is refused.
pub fn split_data_tile(tile: &[u8]) -> Result<Vec<(&[u8], u64)>, FormatError> {
    Ok(walk_data_tile(tile)?
        .into_iter()
        .map(|(at, leaf)| (&tile[at], leaf.timestamped_entry.timestamp))
        .collect())
}

/// Each `TileLeaf` of a data tile with where its bytes are.
fn walk_data_tile(tile: &[u8]) -> Result<Vec<(std::ops::Range<usize>, TileLeaf)>, FormatError> {
    let mut r = Reader::new(tile, "data tile");
    let mut out = Vec::with_capacity(256);
    while !r.is_empty() {
        let at = r.position();
        let leaf = TileLeaf::parse(&mut r).map_err(|e| {
            format_error(
                "data tile",
                format!("entry {} at byte {at}: {e}", out.len()),
            )
        })?;
        out.push((at..r.position(), leaf));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(path: &str) -> Vec<u8> {
        // At run time: the binary may come from a build in another clone.
        let manifest = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
        let p = format!("{manifest}/testdata/{path}");
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// Parse a data tile, check each leaf hash against the level-0 tile, and write the
    /// tile again: the same bytes.
    fn round_trip(data: &[u8], level0: Option<&[u8]>, entries: usize) -> Vec<TileLeaf> {
        let leaves = parse_data_tile(data).expect("the data tile parses");
        assert_eq!(leaves.len(), entries);
        let split = split_data_tile(data).expect("the data tile splits");
        assert_eq!(
            split.iter().map(|(b, _)| *b).collect::<Vec<_>>().concat(),
            data
        );
        for ((bytes, ts), leaf) in split.iter().zip(&leaves) {
            assert_eq!(parse_data_tile(bytes).unwrap(), vec![leaf.clone()]);
            assert_eq!(*ts, leaf.timestamped_entry.timestamp);
        }
        let mut again = Vec::with_capacity(data.len());
        for leaf in &leaves {
            leaf.encode(&mut again);
        }
        assert!(again == data, "re-encoded data tile differs");
        if let Some(level0) = level0 {
            assert_eq!(level0.len(), 32 * entries);
            for (i, leaf) in leaves.iter().enumerate() {
                assert_eq!(
                    leaf.merkle_tree_leaf().leaf_hash(),
                    level0[32 * i..32 * (i + 1)],
                    "leaf hash {i}"
                );
            }
        }
        leaves
    }

    #[test]
    fn sunlight_data_tiles_round_trip_and_hash_to_their_level_0_tiles() {
        let leaves = round_trip(
            &testdata("sunlight/data-000"),
            Some(&testdata("sunlight/level0-000")),
            256,
        );
        for (i, leaf) in leaves.iter().enumerate() {
            let index = crate::sct::parse_leaf_index(&leaf.timestamped_entry.extensions)
                .expect("extensions parse");
            assert_eq!(index, Some(i as u64));
        }
        // Let's Encrypt logs precertificates first: this tile holds nothing else.
        assert!(leaves.iter().all(|l| l.pre_certificate.is_some()));
        let partial = round_trip(
            &testdata("sunlight/data-003.p10"),
            Some(&testdata("sunlight/level0-003.p10")),
            10,
        );
        let index = crate::sct::parse_leaf_index(&partial[9].timestamped_entry.extensions).unwrap();
        assert_eq!(index, Some(3 * 256 + 9));
    }

    #[test]
    fn a_tesseract_data_tile_of_precertificates_round_trips() {
        let leaves = round_trip(&testdata("tesseract/example_tile"), None, 256);
        for (i, leaf) in leaves.iter().enumerate() {
            assert!(
                leaf.pre_certificate.is_some(),
                "entry {i} is a precertificate"
            );
            assert_eq!(leaf.certificate_chain.len(), 2);
            let index = crate::sct::parse_leaf_index(&leaf.timestamped_entry.extensions).unwrap();
            assert_eq!(index, Some(1024 + i as u64));
        }
    }

    #[test]
    fn an_x509_entry_round_trips_and_hashes_as_rfc_6962_says() {
        let leaf = TileLeaf {
            timestamped_entry: TimestampedEntry {
                timestamp: 1234,
                entry: LogEntry::X509 {
                    certificate: b"certificate".to_vec(),
                },
                extensions: crate::sct::leaf_index_extension(8).to_vec(),
            },
            pre_certificate: None,
            certificate_chain: vec![[7; 32], [9; 32]],
        };
        let mut tile = Vec::new();
        leaf.encode(&mut tile);
        leaf.encode(&mut tile);
        assert_eq!(parse_data_tile(&tile), Ok(vec![leaf.clone(), leaf.clone()]));
        // MerkleTreeLeaf: version 0, leaf type 0, then the TimestampedEntry.
        let mtl = leaf.merkle_tree_leaf().to_bytes();
        assert_eq!(mtl[..2], [0, 0]);
        assert_eq!(
            mtl[2..],
            crate::sct::signature_input(&leaf.timestamped_entry)[2..]
        );
        let mut h = Sha256::new();
        h.update([0u8]);
        h.update(&mtl);
        assert_eq!(
            leaf.merkle_tree_leaf().leaf_hash(),
            <[u8; 32]>::from(h.finalize())
        );
        // A chain that is not whole fingerprints.
        let mut bad = Vec::new();
        leaf.timestamped_entry.encode(&mut bad);
        bad.extend_from_slice(&[0, 3, 1, 2, 3]);
        assert!(parse_data_tile(&bad).is_err());
    }

    #[test]
    fn truncated_or_malformed_tiles_are_refused() {
        let data = testdata("sunlight/data-003.p10");
        for cut in [1, 2, 100, data.len() - 1] {
            assert!(parse_data_tile(&data[..cut]).is_err(), "cut at {cut}");
        }
        // An entry type RFC 6962 does not define.
        let mut bad = data.clone();
        bad[9] = 7;
        let e = parse_data_tile(&bad).unwrap_err();
        assert!(e.to_string().contains("entry type 7"), "{e}");
        assert_eq!(parse_data_tile(&[]), Ok(vec![]));
    }
}
