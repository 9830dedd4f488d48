//! Signed certificate timestamps (RFC 6962 §3.2) as a static-ct-api log issues them:
//! with the `leaf_index` extension (static-ct-api "Log entries"), so a client can find
//! its entry in the data tiles without a proof-by-hash endpoint.

use tlogd_static_ct::leaf::TimestampedEntry;
use tlogd_static_ct::sct::{leaf_index_extension, signature_input};
use tlogd_static_ct::signer::LogKey;

use crate::submission::Submission;

/// An SCT, as `add-chain` and `add-pre-chain` answer it (RFC 6962 §4.1), version v1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCertificateTimestamp {
    /// The log's `LogID`: SHA-256 of its key's `SubjectPublicKeyInfo`.
    pub log_id: [u8; 32],
    /// When the entry was sequenced, ms since the Unix epoch.
    pub timestamp: u64,
    /// The `CtExtensions`: the `leaf_index` extension.
    pub extensions: Vec<u8>,
    /// The `DigitallySigned` struct over the RFC 6962 signature input.
    pub signature: Vec<u8>,
}

impl SignedCertificateTimestamp {
    /// Sign `entry`, the entry exactly as the log stored it (the same timestamp and
    /// extensions), so that the SCT verifies against the log's data tile.
    pub fn sign(key: &LogKey, entry: &TimestampedEntry) -> Self {
        SignedCertificateTimestamp {
            log_id: key.log_id(),
            timestamp: entry.timestamp,
            extensions: entry.extensions.clone(),
            signature: key.sign_randomized(&signature_input(entry)),
        }
    }

    /// The JSON body of an `add-chain` or `add-pre-chain` answer (RFC 6962 §4.1), in
    /// its field order: `sct_version` (0), `id`, `timestamp`, `extensions`, `signature`,
    /// the bytes in base64.
    pub fn to_json(&self) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        format!(
            "{{\"sct_version\":0,\"id\":\"{}\",\"timestamp\":{},\"extensions\":\"{}\",\"signature\":\"{}\"}}",
            b64.encode(self.log_id),
            self.timestamp,
            b64.encode(&self.extensions),
            b64.encode(&self.signature)
        )
    }
}

/// The `TimestampedEntry` the log stores for `submission` sequenced at `index` with
/// `timestamp` (what [`crate::StaticCt`] writes in the data tile).
pub fn timestamped_entry(submission: &Submission, index: u64, timestamp: u64) -> TimestampedEntry {
    TimestampedEntry {
        timestamp,
        entry: submission.log_entry().0,
        extensions: leaf_index_extension(index).to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::submission::SubmittedEntry;

    #[test]
    fn an_sct_verifies_over_the_stored_entry() {
        let key = LogKey::from_scalar(&Sha256::digest(b"sct test key")).unwrap();
        let s = Submission {
            entry: SubmittedEntry::Certificate {
                der: b"certificate".to_vec(),
            },
            chain: vec![],
        };
        let te = timestamped_entry(&s, 8, 1234);
        assert_eq!(te.extensions, [0, 0, 5, 0, 0, 0, 0, 8]);
        let sct = SignedCertificateTimestamp::sign(&key, &te);
        assert_eq!(sct.log_id, key.log_id());
        let rest = tlogd_static_ct::signer::verify(
            key.public_key_der(),
            &signature_input(&te),
            &sct.signature,
        )
        .unwrap();
        assert!(rest.is_empty());
        // The answer's JSON: RFC 6962 §4.1's fields, in its order.
        let json = SignedCertificateTimestamp {
            log_id: [0xfb; 32],
            timestamp: 1234,
            extensions: vec![0, 0, 5, 0, 0, 0, 0, 8],
            signature: vec![4, 3, 0, 1, 0xff],
        }
        .to_json();
        assert_eq!(
            json,
            "{\"sct_version\":0,\"id\":\"+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/s=\",\"timestamp\":1234,\"extensions\":\"AAAFAAAAAAg=\",\"signature\":\"BAMAAf8=\"}"
        );
    }
}
