//! What a CT log queues for one validated submission, and its byte encoding (internal
//! to tlogd: the engine queues entries as bytes).
//!
//! Encoding: a tag byte (0: certificate, 1: precertificate), then for a certificate its
//! DER with a 24-bit length; for a precertificate the issuer key hash (32 bytes), the
//! TBSCertificate and the precertificate DER, each with a 24-bit length; then the
//! issuer fingerprints with a 16-bit count.

use tlogd_static_ct::FormatError;
use tlogd_static_ct::leaf::{LogEntry, MAX_CERT_LEN};

/// The entry a submission adds to the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmittedEntry {
    /// `add-chain`: an end-entity certificate.
    Certificate {
        /// Its DER.
        der: Vec<u8>,
    },
    /// `add-pre-chain`: a precertificate.
    Precertificate {
        /// SHA-256 of the issuer's `SubjectPublicKeyInfo` (RFC 6962 §3.2).
        issuer_key_hash: [u8; 32],
        /// The TBSCertificate the log signs and hashes (poison removed).
        tbs_certificate: Vec<u8>,
        /// The precertificate as submitted.
        pre_certificate: Vec<u8>,
    },
}

/// A validated submission: its entry and the SHA-256 of each issuer of its chain, in
/// order (each stored at `issuer/<hex>` before the submission is queued).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The certificate or precertificate.
    pub entry: SubmittedEntry,
    /// The issuers' fingerprints.
    pub chain: Vec<[u8; 32]>,
}

fn bad(why: impl Into<String>) -> FormatError {
    FormatError {
        what: "submission",
        why: why.into(),
    }
}

fn put24(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), FormatError> {
    if bytes.is_empty() || bytes.len() > MAX_CERT_LEN {
        return Err(bad(format!("a certificate of {} bytes", bytes.len())));
    }
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(bytes);
    Ok(())
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.0.len() < n {
            return Err(bad("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn vec24(&mut self) -> Result<&'a [u8], FormatError> {
        let l = self.take(3)?;
        let n = ((l[0] as usize) << 16) | ((l[1] as usize) << 8) | l[2] as usize;
        if n == 0 {
            return Err(bad("an empty certificate"));
        }
        self.take(n)
    }
}

impl Submission {
    /// The queued bytes.
    pub fn encode(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::new();
        match &self.entry {
            SubmittedEntry::Certificate { der } => {
                out.push(0);
                put24(&mut out, der)?;
            }
            SubmittedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate,
                pre_certificate,
            } => {
                out.push(1);
                out.extend_from_slice(issuer_key_hash);
                put24(&mut out, tbs_certificate)?;
                put24(&mut out, pre_certificate)?;
            }
        }
        let n = u16::try_from(self.chain.len()).map_err(|_| bad("more than 65535 issuers"))?;
        // The TileLeaf's fingerprints are a vector of at most 2^16-1 bytes.
        if self.chain.len() * 32 > u16::MAX as usize {
            return Err(bad(format!(
                "{} issuers: too many for a TileLeaf",
                self.chain.len()
            )));
        }
        out.extend_from_slice(&n.to_be_bytes());
        for f in &self.chain {
            out.extend_from_slice(f);
        }
        Ok(out)
    }

    /// Read queued bytes back.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let (leaf, fingerprints) = parse(bytes)?;
        let entry = match leaf {
            EncodedEntry::Certificate(der) => SubmittedEntry::Certificate { der: der.to_vec() },
            EncodedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate,
                pre_certificate,
            } => SubmittedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate: tbs_certificate.to_vec(),
                pre_certificate: pre_certificate.to_vec(),
            },
        };
        let chain = fingerprints
            .chunks_exact(32)
            .map(|f| {
                let mut out = [0u8; 32];
                out.copy_from_slice(f);
                out
            })
            .collect();
        Ok(Submission { entry, chain })
    }

    /// The submitted leaf of queued bytes, checked as [`Submission::decode`] checks
    /// them but nothing copied: what the engine asks of every entry it queues
    /// (accepting it, its dedup key).
    pub fn leaf_of_encoded(bytes: &[u8]) -> Result<SubmittedLeaf<'_>, FormatError> {
        Ok(match parse(bytes)?.0 {
            EncodedEntry::Certificate(der) => SubmittedLeaf::Certificate(der),
            EncodedEntry::Precertificate {
                pre_certificate, ..
            } => SubmittedLeaf::Precertificate(pre_certificate),
        })
    }

    /// The RFC 6962 entry (what the tree hashes), and the precertificate for a
    /// precertificate entry.
    pub fn log_entry(&self) -> (LogEntry, Option<Vec<u8>>) {
        match &self.entry {
            SubmittedEntry::Certificate { der } => (
                LogEntry::X509 {
                    certificate: der.clone(),
                },
                None,
            ),
            SubmittedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate,
                pre_certificate,
            } => (
                LogEntry::Precert {
                    issuer_key_hash: *issuer_key_hash,
                    tbs_certificate: tbs_certificate.clone(),
                },
                Some(pre_certificate.clone()),
            ),
        }
    }
}

/// The leaf of an encoded submission, borrowed ([`Submission::leaf_of_encoded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmittedLeaf<'a> {
    /// A certificate's DER.
    Certificate(&'a [u8]),
    /// A precertificate's DER, as submitted.
    Precertificate(&'a [u8]),
}

/// An encoded submission's entry, borrowed.
enum EncodedEntry<'a> {
    Certificate(&'a [u8]),
    Precertificate {
        issuer_key_hash: [u8; 32],
        tbs_certificate: &'a [u8],
        pre_certificate: &'a [u8],
    },
}

/// Reads an encoded submission: its entry and its issuer fingerprints (32 bytes each).
fn parse(bytes: &[u8]) -> Result<(EncodedEntry<'_>, &[u8]), FormatError> {
    let mut c = Cursor(bytes);
    let entry = match c.take(1)?[0] {
        0 => EncodedEntry::Certificate(c.vec24()?),
        1 => {
            let mut issuer_key_hash = [0u8; 32];
            issuer_key_hash.copy_from_slice(c.take(32)?);
            EncodedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate: c.vec24()?,
                pre_certificate: c.vec24()?,
            }
        }
        t => return Err(bad(format!("entry tag {t}"))),
    };
    let n = u16::from_be_bytes([c.take(1)?[0], c.take(1)?[0]]) as usize;
    if n * 32 > u16::MAX as usize {
        return Err(bad(format!("{n} issuers: too many for a TileLeaf")));
    }
    let fingerprints = c.take(n * 32)?;
    if !c.0.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok((entry, fingerprints))
}
