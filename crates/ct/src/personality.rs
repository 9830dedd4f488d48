//! [`StaticCt`]: the engine's view of a CT log's entries.

use sha2::{Digest, Sha256};
use tlogd_core::hash::Hash;
use tlogd_core::personality::{EntryError, Personality, StoredEntry};
use tlogd_core::tile::TileKind;
use tlogd_static_ct::leaf::{TileLeaf, TimestampedEntry};
use tlogd_static_ct::sct::leaf_index_extension;
use tlogd_static_ct::{LogEntry, parse_data_tile, split_data_tile};

use crate::submission::{Submission, SubmittedLeaf};

/// The static-ct-api personality: entries are [`Submission`]s, bundled in data tiles
/// (`tile/data/<N>`) as `TileLeaf`s, hashed as RFC 6962 `MerkleTreeLeaf`s.
#[derive(Clone, Copy, Debug, Default)]
pub struct StaticCt;

/// The largest submission queued: a certificate (or a precertificate and its TBS) and
/// its issuers' fingerprints. TesseraCT refuses request bodies over 512 KiB; their
/// base64 chains decode to less.
pub const MAX_SUBMISSION: usize = 1 << 20;

/// What duplicates share: the submitted certificate, or the submitted precertificate,
/// whatever the chain (RFC 6962 §4.1: a resubmission gets the same SCT).
fn dedup_key_of(entry: &LogEntry, pre_certificate: Option<&[u8]>) -> [u8; 32] {
    let mut h = Sha256::new();
    match (entry, pre_certificate) {
        (LogEntry::X509 { certificate }, _) => return certificate_dedup_key(certificate),
        (LogEntry::Precert { .. }, Some(pre)) => return precertificate_dedup_key(pre),
        // A precertificate entry always has its precertificate; never reached.
        (
            LogEntry::Precert {
                tbs_certificate, ..
            },
            None,
        ) => {
            h.update([2u8]);
            h.update(tbs_certificate);
        }
    }
    h.finalize().into()
}

/// The dedup key of a certificate entry whose DER is `der`, from the submitted leaf
/// alone: a resubmitted certificate is found before its chain is validated (what
/// [`StaticCt`]'s `dedup_key` gives once the submission is built).
pub fn certificate_dedup_key(der: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(der);
    h.finalize().into()
}

/// The dedup key of a precertificate entry whose submitted precertificate is `der`
/// (see [`certificate_dedup_key`]).
pub fn precertificate_dedup_key(der: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(der);
    h.finalize().into()
}

fn invalid(e: impl std::fmt::Display) -> EntryError {
    EntryError::Invalid(e.to_string())
}

impl Personality for StaticCt {
    fn name(&self) -> &'static str {
        "static-ct"
    }

    fn max_entry_size(&self) -> usize {
        MAX_SUBMISSION
    }

    fn accept(&self, entry: &[u8]) -> Result<Hash, EntryError> {
        if entry.is_empty() {
            return Err(EntryError::Empty);
        }
        if entry.len() > MAX_SUBMISSION {
            return Err(EntryError::TooLarge {
                size: entry.len(),
                max: MAX_SUBMISSION,
            });
        }
        Submission::leaf_of_encoded(entry).map_err(invalid)?;
        // The leaf hash covers the timestamp and the leaf_index: `encode` computes it.
        Ok([0; 32])
    }

    fn dedup_key(&self, entry: &[u8]) -> [u8; 32] {
        // What `dedup_key_of` gives for the decoded entry, without copying it.
        match Submission::leaf_of_encoded(entry) {
            Ok(SubmittedLeaf::Certificate(der)) => certificate_dedup_key(der),
            Ok(SubmittedLeaf::Precertificate(der)) => precertificate_dedup_key(der),
            // Refused by `accept` before any lookup; keyed apart from any entry.
            Err(_) => Sha256::digest(entry).into(),
        }
    }

    fn bundle_kind(&self) -> TileKind {
        TileKind::Data
    }

    fn encode(
        &self,
        entry: &[u8],
        _accepted: &Hash,
        index: u64,
        timestamp: u64,
        bundle: &mut Vec<u8>,
    ) -> Result<Hash, EntryError> {
        let submission = Submission::decode(entry).map_err(invalid)?;
        if index > tlogd_static_ct::sct::MAX_LEAF_INDEX {
            return Err(EntryError::Invalid("the log is full (2^40 entries)".into()));
        }
        let (entry, pre_certificate) = submission.log_entry();
        let leaf = TileLeaf {
            timestamped_entry: TimestampedEntry {
                timestamp,
                entry,
                extensions: leaf_index_extension(index).to_vec(),
            },
            pre_certificate,
            certificate_chain: submission.chain,
        };
        leaf.encode(bundle);
        Ok(leaf.merkle_tree_leaf().leaf_hash())
    }

    /// Every TileLeaf starts with its timestamp.
    fn stores_timestamps(&self) -> bool {
        true
    }

    fn split_bundle<'a>(&self, bytes: &'a [u8]) -> Result<Vec<StoredEntry<'a>>, EntryError> {
        Ok(split_data_tile(bytes)
            .map_err(|e| EntryError::Malformed(e.to_string()))?
            .into_iter()
            .map(|(bytes, timestamp)| StoredEntry { bytes, timestamp })
            .collect())
    }

    fn stored_leaf(&self, entry: &StoredEntry<'_>) -> Hash {
        // `split_bundle` parsed it; a leaf that no longer parses hashes to nothing any
        // tree holds, so a check against the tree catches it.
        match parse_data_tile(entry.bytes).as_deref() {
            Ok([leaf]) => leaf.merkle_tree_leaf().leaf_hash(),
            _ => [0; 32],
        }
    }

    fn stored_dedup_key(&self, entry: &StoredEntry<'_>) -> [u8; 32] {
        match parse_data_tile(entry.bytes).as_deref() {
            Ok([leaf]) => dedup_key_of(
                &leaf.timestamped_entry.entry,
                leaf.pre_certificate.as_deref(),
            ),
            _ => [0; 32],
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use tlogd_core::engine::memory::MemoryStorage;
    use tlogd_core::engine::{Log, LogStorage};
    use tlogd_core::tile::TileId;
    use tlogd_static_ct::sct::parse_leaf_index;

    use super::*;
    use crate::submission::SubmittedEntry;

    fn submission(i: u64) -> Submission {
        let entry = if i.is_multiple_of(3) {
            SubmittedEntry::Precertificate {
                issuer_key_hash: [i as u8; 32],
                tbs_certificate: format!("tbs {i}").into_bytes(),
                pre_certificate: format!("precertificate {i}").into_bytes(),
            }
        } else {
            SubmittedEntry::Certificate {
                der: format!("certificate {i}").into_bytes(),
            }
        };
        Submission {
            entry,
            chain: vec![[1; 32], [2; 32]],
        }
    }

    #[test]
    fn submissions_round_trip_and_bad_ones_are_refused() {
        for i in 0..3 {
            let s = submission(i);
            let bytes = s.encode().unwrap();
            assert_eq!(Submission::decode(&bytes), Ok(s.clone()));
            // The borrowed read gives the leaf the owned one holds.
            let leaf = match &s.entry {
                SubmittedEntry::Certificate { der } => SubmittedLeaf::Certificate(der),
                SubmittedEntry::Precertificate {
                    pre_certificate, ..
                } => SubmittedLeaf::Precertificate(pre_certificate),
            };
            assert_eq!(Submission::leaf_of_encoded(&bytes), Ok(leaf));
            assert!(StaticCt.accept(&bytes).is_ok());
            assert!(StaticCt.accept(&bytes[..bytes.len() - 1]).is_err());
            let mut more = bytes.clone();
            more.push(0);
            assert!(StaticCt.accept(&more).is_err(), "trailing bytes");
        }
        assert_eq!(StaticCt.accept(&[]), Err(EntryError::Empty));
        assert!(StaticCt.accept(&[2, 0, 0, 1, 0]).is_err());
        let empty_cert = Submission {
            entry: SubmittedEntry::Certificate { der: vec![] },
            chain: vec![],
        };
        assert!(empty_cert.encode().is_err());
    }

    /// The engine with the CT personality: the data tiles it writes are static-ct-api
    /// `TileLeaf`s with each entry's index in its `leaf_index` and its timestamp, whose
    /// leaf hashes are the level-0 tiles'; entries read back; a resubmission of the same
    /// certificate with another chain is a duplicate.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_engine_writes_static_ct_data_tiles() {
        let storage = Arc::new(MemoryStorage::new());
        let mut cfg = tlogd_core::conformance::config(64);
        cfg.personality = Arc::new(StaticCt);
        let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
        let bytes: Vec<Bytes> = (0..300)
            .map(|i| Bytes::from(submission(i).encode().unwrap()))
            .collect();
        tlogd_core::conformance::add_in_order(&log, bytes, 0).await;
        let read = log.read_entry(258).await.unwrap().expect("entry 258");
        let leaf = &parse_data_tile(&read.bytes).unwrap()[0];
        assert_eq!(
            parse_leaf_index(&leaf.timestamped_entry.extensions),
            Ok(Some(258))
        );
        assert_eq!(leaf.timestamped_entry.timestamp, read.timestamp);
        assert_eq!(
            leaf.pre_certificate.as_deref(),
            Some(&b"precertificate 258"[..])
        );
        // An add answers with the timestamp its entry was stored with (the SCT's).
        let added = log
            .add(Bytes::from(submission(300).encode().unwrap()))
            .await
            .unwrap();
        let stored = log.read_entry(added.index).await.unwrap().unwrap();
        assert_eq!(
            (added.index, added.timestamp),
            (300, Some(stored.timestamp))
        );
        log.shutdown();
        tasks.join().await;
        let mut newest = 0;
        for (n, width) in [(0u64, 256u16), (1, 45)] {
            let data = storage
                .read_tile(&TileId::data(n, width))
                .await
                .unwrap()
                .unwrap();
            let level0 = storage
                .read_tile(&TileId::hash(0, n, width))
                .await
                .unwrap()
                .unwrap();
            let leaves = parse_data_tile(&data).unwrap();
            assert_eq!(leaves.len(), width as usize);
            for (i, leaf) in leaves.iter().enumerate() {
                let index = 256 * n + i as u64;
                let te = &leaf.timestamped_entry;
                assert_eq!(parse_leaf_index(&te.extensions), Ok(Some(index)));
                assert!(te.timestamp >= newest, "timestamps never go back");
                newest = te.timestamp;
                assert_eq!(
                    leaf.merkle_tree_leaf().leaf_hash()[..],
                    level0[32 * i..32 * (i + 1)]
                );
                let (entry, pre) = submission(index).log_entry();
                assert_eq!(te.entry, entry);
                assert_eq!(leaf.pre_certificate, pre);
                assert_eq!(leaf.certificate_chain, vec![[1; 32], [2; 32]]);
            }
        }
        // The same certificate with another chain shares its dedup key.
        let mut other_chain = submission(1);
        other_chain.chain = vec![[9; 32]];
        let a = StaticCt.dedup_key(&submission(1).encode().unwrap());
        assert_eq!(StaticCt.dedup_key(&other_chain.encode().unwrap()), a);
        assert_ne!(StaticCt.dedup_key(&submission(2).encode().unwrap()), a);
        // ... and the key from the leaf alone is the same.
        assert_eq!(certificate_dedup_key(b"certificate 1"), a);
        // A precertificate's key is never a certificate's, whatever the bytes.
        let pre = StaticCt.dedup_key(&submission(3).encode().unwrap());
        assert_ne!(certificate_dedup_key(b"precertificate 3"), pre);
        assert_eq!(precertificate_dedup_key(b"precertificate 3"), pre);
    }
}
