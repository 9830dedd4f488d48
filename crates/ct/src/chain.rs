//! X.509 chain validation for `add-chain` and `add-pre-chain` (RFC 6962 §4.1, §4.2), as
//! TesseraCT's `lax509` and Azul do it.
//!
//! RFC 6962 §3.1: a log MUST verify that the submitted certificate or precertificate has
//! a valid signature chain to a root it accepts, using the intermediates the submitter
//! gave, in the order given; it records the chain. A CT log observes what CAs issued,
//! including what a browser would refuse (TesseraCT's `internal/lax509` README), so
//! validation is lax where a browser is strict:
//!
//! - every certificate must parse, and its outer `signatureAlgorithm` must equal its
//!   TBSCertificate's `signature` byte for byte (Go's parser and Azul refuse the others);
//! - the chain is the path: certificate `i + 1` issued certificate `i` (its subject is
//!   byte-for-byte `i`'s issuer, and its key verifies `i`'s signature over the raw TBS);
//!   the last certificate is an accepted root, or an accepted root issued it (that root
//!   is then appended to the issuers, RFC 6962 §4.1: "the last is either the root
//!   certificate or a certificate that chains to a known root certificate");
//! - every intermediate in the path is a CA (`basicConstraints` cA=true) and respects
//!   its `pathLenConstraint`; the root, submitted or appended, is trusted as the
//!   operator configured it (TesseraCT checks neither for roots: an old root without
//!   basicConstraints still anchors what its CA issued) (RFC 5280 §4.2.1.9: self-issued
//!   certificates do not count, nor does a Precertificate Signing Certificate, which
//!   RFC 6962 §3.1 places between the precertificate and the CA that will issue the
//!   final certificate, outside that certificate's path);
//! - not checked: validity periods of issuers, name constraints, certificate policies,
//!   key usage bits, issuers' extended key usages, unknown critical extensions (the
//!   precertificate poison is one).
//!
//! Signature algorithms: RSA PKCS#1 v1.5 with SHA-1, SHA-256, SHA-384 or SHA-512 (SHA-1
//! too: CT logs what was issued, and Chrome's Merge Delay Monitor Root still uses it);
//! RSASSA-PSS with SHA-256, SHA-384 or SHA-512 in the parameter forms Go accepts;
//! ECDSA on P-256, P-384 or P-521 with SHA-1, SHA-256, SHA-384 or SHA-512, in any
//! combination (the digest named by the algorithm, applied to the curve as FIPS 186-4
//! §6.4 says); Ed25519. Others (DSA, MD5, SHA-224, ...) are refused by name. RSA and
//! ECDSA are verified with aws-lc-rs where it takes the key (`fast_rsa`, `fast_ecdsa`),
//! else with RustCrypto (the `rsa`, `p256`, `p384` and `p521` crates).
//!
//! The submission's leaf is then checked against the operator's [`ChainPolicy`], and the
//! entry to log is built: the certificate, or for a precertificate (RFC 6962 §3.2) the
//! issuer key hash and the TBSCertificate with the poison removed (and the issuer and
//! authority key identifier of a Precertificate Signing Certificate's issuer), cut from
//! the submitted bytes rather than re-encoded.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use rsa::{BigUint, Pkcs1v15Sign, RsaPublicKey};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::der::{self, Reader, Tlv};
use crate::submission::{Submission, SubmittedEntry};

mod signature;
use signature::{SigAlg, VerifyError, verify_signed_by};

/// The most certificates a submitted chain may hold. Real chains have 2 to 5; the bound
/// caps the signature verifications one request costs.
pub const MAX_CHAIN_LEN: usize = 10;

/// The largest RSA modulus accepted, in bits: real CA keys reach 4096; a bigger key only
/// makes a request cost more.
const MAX_RSA_BITS: usize = 8192;

/// The largest RSA modulus of a submitted issuer's key, in bits (Mozilla's Root Store
/// Policy §5.1 names 2048 to 4096): checked before any signature work, so a made-up
/// key cannot make a request cost more. An operator's root may be larger
/// ([`MAX_RSA_BITS`]).
const MAX_ISSUER_RSA_BITS: usize = 4096;

// OBJECT IDENTIFIER contents (X.690 §8.19), compared as bytes.
/// RFC 6962 §3.1 precertificate poison extension, 1.3.6.1.4.1.11129.2.4.3.
const OID_CT_POISON: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x03];
/// RFC 6962 §3.1 Certificate Transparency extended key usage, 1.3.6.1.4.1.11129.2.4.4.
const OID_CT_EKU: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x04];
/// authorityKeyIdentifier, 2.5.29.35.
const OID_AKI: &[u8] = &[0x55, 0x1d, 0x23];
/// extKeyUsage, 2.5.29.37.
const OID_EKU: &[u8] = &[0x55, 0x1d, 0x25];
/// anyExtendedKeyUsage (RFC 5280 §4.2.1.12), as configured in a [`ChainPolicy`].
const ANY_EKU: &str = "2.5.29.37.0";

const OID_RSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
const OID_RSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
const OID_RSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
const OID_RSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
/// RSASSA-PSS (RFC 4055 §3.1) and the parts of its parameters.
const OID_RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
const OID_MGF1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x08];
const OID_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
const OID_SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
const OID_SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];
const OID_ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const OID_ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
/// Ed25519 (RFC 8410), both the signature algorithm and the key algorithm.
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_RSA_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];

/// Names for the refused algorithms a submitter is most likely to meet, so the error
/// says more than an OID.
const KNOWN_UNSUPPORTED: &[(&str, &str)] = &[
    (
        "1.2.840.113549.1.1.10",
        "RSASSA-PSS with parameters other than SHA-256/384/512, MGF1 of the same hash and a salt of the hash's length",
    ),
    ("1.2.840.113549.1.1.4", "md5WithRSAEncryption"),
    ("1.2.840.113549.1.1.2", "md2WithRSAEncryption"),
    ("1.2.840.113549.1.1.14", "sha224WithRSAEncryption"),
    ("1.2.840.10040.4.3", "dsa-with-sha1"),
    ("2.16.840.1.101.3.4.3.2", "dsa-with-sha256"),
    ("1.2.840.10045.4.3.1", "ecdsa-with-SHA224"),
    ("1.3.101.113", "Ed448"),
];

// ---------------------------------------------------------------------------------------
// Public API.

/// `der` as a PEM `CERTIFICATE` block (64 base64 characters a line, ending in a
/// newline): what [`Roots::from_pem`] reads.
pub fn certificate_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 60);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The roots a log accepts (a PEM bundle): parsed once, deduplicated by the SHA-256 of
/// their DER, in the order given (`get-roots`, RFC 6962 §4.7, lists them so).
#[derive(Clone, Default)]
pub struct Roots {
    certs: Vec<Arc<CaCert>>,
    by_fingerprint: HashMap<[u8; 32], usize>,
    /// Raw subject Name → indices: the roots that may have issued a certificate naming
    /// that issuer (several roots can share a name, e.g. an RSA and an ECDSA
    /// generation of one CA).
    by_subject: HashMap<Vec<u8>, Vec<usize>>,
}

impl fmt::Debug for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Roots({} certificates)", self.certs.len())
    }
}

impl Roots {
    /// Parses a PEM bundle. Blocks that are not `CERTIFICATE`, or that do not decode or
    /// parse as certificates, are skipped and reported in the returned warnings, one
    /// line each: one bad root must not take a log down. A root repeated is kept once.
    /// An empty result is not an error here: the caller decides (a log with no roots
    /// accepts nothing).
    pub fn from_pem(pem: &[u8]) -> (Roots, Vec<String>) {
        let mut roots = Roots::default();
        let mut warnings = Vec::new();
        for (n, block) in pem_blocks(pem).into_iter().enumerate() {
            let n = n + 1;
            match block {
                PemBlock::Unterminated { label } => {
                    warnings.push(format!("PEM block {n} ({label}) has no END line: skipped"))
                }
                PemBlock::Block { label, .. } if label != "CERTIFICATE" => warnings.push(format!(
                    "PEM block {n} is a {label}, not a CERTIFICATE: skipped"
                )),
                PemBlock::Block { body: Err(e), .. } => {
                    warnings.push(format!("PEM block {n} is not valid base64 ({e}): skipped"))
                }
                PemBlock::Block { body: Ok(der), .. } => {
                    if let Err(e) = roots.push(der) {
                        warnings.push(format!(
                            "PEM block {n} is not a usable certificate ({e}): skipped"
                        ));
                    }
                }
            }
        }
        (roots, warnings)
    }

    /// Adds one root (its DER); `Ok(false)` if it was already there.
    fn push(&mut self, der: Vec<u8>) -> Result<bool, String> {
        let root = CaCert::parse(der).map_err(|e| e.to_string())?;
        Ok(self.push_parsed(Arc::new(root)))
    }

    /// Adds one parsed root; `false` if it was already there.
    fn push_parsed(&mut self, root: Arc<CaCert>) -> bool {
        if self.by_fingerprint.contains_key(&root.fingerprint) {
            return false;
        }
        let index = self.certs.len();
        self.by_fingerprint.insert(root.fingerprint, index);
        self.by_subject
            .entry(root.cert().subject.to_vec())
            .or_default()
            .push(index);
        self.certs.push(root);
        true
    }

    /// The roots' DER, in order (for `get-roots`).
    pub fn ders(&self) -> impl Iterator<Item = &[u8]> {
        self.certs.iter().map(|c| c.der())
    }

    /// How many roots.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Whether there is no root (a log with none accepts nothing).
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    /// Whether the certificate with this SHA-256 fingerprint (of its DER) is a root.
    pub fn contains(&self, fingerprint: &[u8; 32]) -> bool {
        self.by_fingerprint.contains_key(fingerprint)
    }

    /// A root set holding every root of `self`, then those of `other` it lacks, in order.
    /// Used on a reload (SIGHUP): a root once accepted is never dropped, as entries
    /// already logged chain to it.
    pub fn union(&self, other: &Roots) -> Roots {
        let mut out = self.clone();
        for c in &other.certs {
            out.push_parsed(c.clone());
        }
        out
    }

    /// The roots without those `drop` says (an operator's rejected fingerprints), in
    /// order.
    pub fn without(&self, drop: impl Fn(&[u8; 32]) -> bool) -> Roots {
        let mut out = Roots::default();
        for c in self.certs.iter().filter(|c| !drop(&c.fingerprint)) {
            out.push_parsed(c.clone());
        }
        out
    }

    /// The SHA-256 of each root's DER, in order.
    pub fn fingerprints(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.certs.iter().map(|c| &c.fingerprint)
    }

    /// Each root in order: the SHA-256 of its DER, its subject (RFC 4514 text) and its
    /// DER.
    pub fn entries(&self) -> impl Iterator<Item = ([u8; 32], String, &[u8])> {
        self.certs
            .iter()
            .map(|c| (c.fingerprint, c.cert().x509.subject().to_string(), c.der()))
    }

    /// The accepted root that issued `child` (certificate `index` of the chain).
    /// `parsed`: `child` as parsed once, which remembers the roots found to sign it.
    fn issuer_of(
        &self,
        child: &Cert<'_>,
        index: usize,
        parsed: Option<&CaCert>,
    ) -> Result<&Arc<CaCert>, ChainError> {
        let candidates = self
            .by_subject
            .get(child.issuer)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut failure: Option<VerifyError> = None;
        for &i in candidates {
            let root = &self.certs[i];
            if parsed.is_some_and(|p| p.is_signed_by(&root.fingerprint)) {
                return Ok(root);
            }
            match verify_signed_by(child, root.cert()) {
                Ok(()) => {
                    if let Some(p) = parsed {
                        p.signed_by(root.fingerprint);
                    }
                    return Ok(root);
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let issuer = child.issuer_name();
        Err(match failure {
            Some(VerifyError::Unsupported(algorithm)) => {
                ChainError::UnsupportedAlgorithm { index, algorithm }
            }
            Some(VerifyError::Invalid(why)) => ChainError::NoRoot {
                index,
                issuer,
                why: format!("the accepted root of that name did not sign it ({why})"),
            },
            None => ChainError::NoRoot {
                index,
                issuer,
                why: "no accepted root has that name".into(),
            },
        })
    }
}

/// Which endpoint a chain came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainKind {
    /// `add-chain` (RFC 6962 §4.1): the leaf is a certificate.
    Certificate,
    /// `add-pre-chain` (RFC 6962 §4.2): the leaf is a precertificate.
    Precertificate,
}

/// The operator's policy on the leaf, TesseraCT's and Sunlight's options. The default
/// allows everything.
#[derive(Clone, Debug, Default)]
pub struct ChainPolicy {
    /// Refuse a leaf whose notAfter is before now.
    pub reject_expired: bool,
    /// Refuse a leaf whose notAfter is now or later (a log of expired certificates).
    pub reject_unexpired: bool,
    /// Milliseconds since the epoch: the leaf's notAfter must be at or after it (the
    /// start of a temporal shard).
    pub not_after_start: Option<u64>,
    /// Milliseconds since the epoch: the leaf's notAfter must be before it (the end of a
    /// temporal shard, exclusive).
    pub not_after_limit: Option<u64>,
    /// Extended key usages (dotted OIDs, e.g. `1.3.6.1.5.5.7.3.1` for serverAuth); empty
    /// accepts any leaf. As TesseraCT's `ext_key_usages` does: otherwise the leaf must
    /// carry an extKeyUsage extension listing at least one of them, so a leaf without
    /// the extension is refused, and a leaf's own anyExtendedKeyUsage matches only if
    /// listed; listing anyExtendedKeyUsage (`2.5.29.37.0`) turns the check off.
    /// Issuers' extended key usages are not checked (`lax509`: the Certificate
    /// Transparency EKU of a Precertificate Signing Certificate need not be in its
    /// issuer's).
    pub allowed_ekus: Vec<String>,
    /// Extensions (dotted OIDs) a leaf must not carry.
    pub rejected_extensions: Vec<String>,
    /// Refuse precertificates signed by a Precertificate Signing Certificate, as the
    /// static-ct-api spec allows ("MAY reject") and Sunlight and Azul do; TesseraCT
    /// accepts them (RFC 6962 §3.1), the default here.
    pub reject_pre_issuers: bool,
}

/// A validated chain: what to queue and which issuer certificates to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedChain {
    /// The entry to log and its issuers' fingerprints.
    pub submission: Submission,
    /// The DER of each issuer of the verified path in order: the submitted chain after
    /// the leaf, then the root if the submitter left it out. `submission.chain` holds
    /// their SHA-256s in the same order.
    pub issuers: Vec<Vec<u8>>,
    /// The leaf's notBefore, ms since the Unix epoch (negative before 1970): how old
    /// the certificate is, for the operator's rate limit of old submissions.
    pub not_before_ms: i64,
    /// SHA-256 of the `SubjectPublicKeyInfo` of the CA that issued the certificate (for
    /// a precertificate, of the CA that will issue the final certificate: RFC 6962
    /// §3.2's `issuer_key_hash`), for the operator's rate limit per issuer.
    pub issuer_key_hash: [u8; 32],
}

/// A position in the verified path, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathCert {
    /// Certificate `n` of the submitted chain (0 is the leaf).
    Submitted(usize),
    /// The accepted root the log appended to the submitted chain.
    AppendedRoot,
}

impl fmt::Display for PathCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathCert::Submitted(n) => write!(f, "certificate {n}"),
            PathCert::AppendedRoot => {
                f.write_str("the accepted root that issued the last certificate")
            }
        }
    }
}

/// Why a chain is refused; each message fits an HTTP 400 body (certificates are
/// numbered from 0, the leaf).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// No certificate was submitted.
    #[error("empty chain")]
    Empty,
    /// More certificates than [`MAX_CHAIN_LEN`].
    #[error("a chain of {len} certificates: at most {max} are accepted")]
    TooLong {
        /// Submitted.
        len: usize,
        /// Accepted.
        max: usize,
    },
    /// A certificate does not parse.
    #[error("certificate {index} does not parse: {why}")]
    Malformed {
        /// Its position.
        index: usize,
        /// The parser's complaint.
        why: String,
    },
    /// A certificate's outer signatureAlgorithm differs from its TBSCertificate's.
    #[error(
        "certificate {index}: its signatureAlgorithm differs from its TBSCertificate's signature field"
    )]
    MismatchedSignatureAlgorithm {
        /// Its position.
        index: usize,
    },
    /// A certificate appears twice.
    #[error("certificate {index} repeats certificate {first}")]
    Duplicate {
        /// The repeat.
        index: usize,
        /// The first occurrence.
        first: usize,
    },
    /// A precertificate came to `add-chain`.
    #[error("the leaf is a precertificate: submit it to add-pre-chain")]
    PrecertificateToAddChain,
    /// A certificate came to `add-pre-chain`.
    #[error(
        "the leaf is not a precertificate (it has no CT poison extension): submit it to add-chain"
    )]
    CertificateToAddPreChain,
    /// The poison extension is there but not as RFC 6962 §3.1 defines it.
    #[error("the leaf's CT poison extension is invalid: {0}")]
    InvalidPoison(&'static str),
    /// The leaf expired and the log refuses expired certificates.
    #[error("the leaf expired (notAfter {not_after}): this log refuses expired certificates")]
    Expired {
        /// The leaf's notAfter (RFC 3339).
        not_after: String,
    },
    /// The leaf has not expired and the log accepts only expired certificates.
    #[error(
        "the leaf has not expired (notAfter {not_after}): this log accepts only expired certificates"
    )]
    NotExpired {
        /// The leaf's notAfter (RFC 3339).
        not_after: String,
    },
    /// The leaf's notAfter is before the log's shard.
    #[error("the leaf's notAfter {not_after} is before this log's start {start}")]
    NotAfterTooEarly {
        /// The leaf's notAfter (RFC 3339).
        not_after: String,
        /// The shard's start (RFC 3339).
        start: String,
    },
    /// The leaf's notAfter is at or after the log's shard end.
    #[error("the leaf's notAfter {not_after} is not before this log's limit {limit}")]
    NotAfterTooLate {
        /// The leaf's notAfter (RFC 3339).
        not_after: String,
        /// The shard's end (RFC 3339, exclusive).
        limit: String,
    },
    /// The leaf carries an extension the log refuses.
    #[error("the leaf carries extension {oid}, which this log refuses")]
    RejectedExtension {
        /// The extension's OID.
        oid: String,
    },
    /// The leaf's extended key usages are none of those the log accepts.
    #[error("the leaf's extended key usages include none of those this log accepts ({allowed})")]
    ExtKeyUsage {
        /// The accepted ones.
        allowed: String,
    },
    /// Certificate `index + 1` did not issue certificate `index`: a misordered chain or
    /// a certificate that does not belong.
    #[error("certificate {} did not issue certificate {index}: {why}", index + 1)]
    NotIssuer {
        /// The child's position.
        index: usize,
        /// Name mismatch or failed signature.
        why: String,
    },
    /// A signature uses an algorithm this log does not verify.
    #[error("certificate {index} is signed with {algorithm}, which this log does not support")]
    UnsupportedAlgorithm {
        /// The signed certificate's position.
        index: usize,
        /// The algorithm's name or OID.
        algorithm: String,
    },
    /// The last certificate is not a root and no accepted root issued it.
    #[error(
        "certificate {index} (issuer \"{issuer}\") does not chain to a root this log accepts: {why}"
    )]
    NoRoot {
        /// The last certificate's position.
        index: usize,
        /// Its issuer's name.
        issuer: String,
        /// Why no root fits.
        why: String,
    },
    /// A submitted issuer's key is one no root program allows: refused before any
    /// signature is checked.
    #[error("certificate {index} has a key this log does not accept: {why}")]
    IssuerKey {
        /// Its position.
        index: usize,
        /// What is wrong with the key.
        why: String,
    },
    /// An issuer is not a CA.
    #[error("{which} is not a CA certificate (no basicConstraints with cA true)")]
    NotCa {
        /// Which issuer.
        which: PathCert,
    },
    /// An issuer's pathLenConstraint is exceeded.
    #[error("{which} allows {max} intermediate CA certificates below it, the path has {found}")]
    PathLen {
        /// Which issuer.
        which: PathCert,
        /// Its pathLenConstraint.
        max: u32,
        /// The intermediates below it.
        found: usize,
    },
    /// The precertificate has no issuer in the path (it is itself an accepted root).
    #[error("the precertificate has no issuer in the path")]
    NoIssuer,
    /// A Precertificate Signing Certificate is the last certificate of the path.
    #[error(
        "the precertificate was signed by a Precertificate Signing Certificate that has no issuer in the path (RFC 6962 §3.1)"
    )]
    PreIssuerWithoutIssuer,
    /// The policy refuses Precertificate Signing Certificates.
    #[error(
        "the precertificate was signed by a Precertificate Signing Certificate, which this log refuses: submit the chain of a precertificate its CA signed directly"
    )]
    PreIssuerRefused,
    /// The precertificate's TBSCertificate could not be rebuilt.
    #[error("the precertificate's TBSCertificate cannot be rebuilt: {0}")]
    Tbs(String),
}

thread_local! {
    /// Under [`validate_if_cheap`]: how many signature checks it made on this thread,
    /// and whether it gave up on one (deferred). `None` otherwise.
    static INLINE: std::cell::Cell<Option<(u8, bool)>> = const { std::cell::Cell::new(None) };
}

/// The uncached signature checks [`validate_if_cheap`] makes before it defers: a chain
/// of made-up links costs an async thread at most this many cheap checks.
const INLINE_CHECKS: u8 = 3;

/// [`validate`], on the calling thread, when its signature checks are few (at most
/// [`INLINE_CHECKS`] not already cached) and cheap (aws-lc-rs's RSA of 2048 to 4096
/// bits, ECDSA P-256, Ed25519: 15 to 60 µs each; CA links are checked once per process);
/// `None` when one is not (P-384 ~0.2 ms, larger RSA keys, P-521, the fallbacks to
/// RustCrypto), to be validated with [`validate`] where blocking is fine. A caller on
/// an async runtime validates inline what costs about as much as handing it to
/// another thread, and hands off only the rest.
pub fn validate_if_cheap(
    chain: &[Vec<u8>],
    kind: ChainKind,
    roots: &Roots,
    policy: &ChainPolicy,
    now_ms: u64,
) -> Option<Result<ValidatedChain, ChainError>> {
    /// Leaves the thread as it found it, even if `validate` panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            INLINE.set(None);
        }
    }
    INLINE.set(Some((0, false)));
    let _reset = Reset;
    let validated = validate(chain, kind, roots, policy, now_ms);
    let deferred = INLINE.get().is_some_and(|(_, deferred)| deferred);
    (!deferred).then_some(validated)
}

/// Before a signature check: under [`validate_if_cheap`], one that is `cheap` within
/// its budget goes on; any other is refused, and the deferral recorded. Otherwise `Ok`.
fn inline_check(cheap: bool) -> Result<(), VerifyError> {
    match INLINE.get() {
        None => Ok(()),
        Some((made, false)) if cheap && made < INLINE_CHECKS => {
            INLINE.set(Some((made + 1, false)));
            Ok(())
        }
        Some((made, _)) => {
            INLINE.set(Some((made, true)));
            Err(VerifyError::Unsupported(
                "deferred: a costly signature check".into(),
            ))
        }
    }
}

/// Validates a submitted chain (leaf first, DER) for `kind`'s endpoint against the
/// accepted roots and the policy, at `now_ms` (milliseconds since the epoch), and
/// returns the entry to log and the issuers to store.
pub fn validate(
    chain: &[Vec<u8>],
    kind: ChainKind,
    roots: &Roots,
    policy: &ChainPolicy,
    now_ms: u64,
) -> Result<ValidatedChain, ChainError> {
    if chain.is_empty() {
        return Err(ChainError::Empty);
    }
    if chain.len() > MAX_CHAIN_LEN {
        return Err(ChainError::TooLong {
            len: chain.len(),
            max: MAX_CHAIN_LEN,
        });
    }
    // The leaf is parsed for each submission (it is new, or answered before this as a
    // resubmission); the CA certificates after it are parsed once per process and found
    // by their bytes (`CaCert`), as every submission under one intermediate repeats
    // them.
    let leaf = Cert::parse(&chain[0]).map_err(|e| e.at(0))?;
    let mut cas: Vec<Arc<CaCert>> = Vec::with_capacity(chain.len() - 1);
    let mut parsed_now = Vec::new();
    for (index, der) in chain.iter().enumerate().skip(1) {
        match cached_ca(der) {
            Some(ca) => cas.push(ca),
            None => {
                cas.push(Arc::new(
                    CaCert::parse(der.clone()).map_err(|e| e.at(index))?,
                ));
                parsed_now.push(index - 1);
            }
        }
    }
    // A path never repeats a certificate (Go's verifier skips a candidate already in
    // the chain); a repeat would also be stored twice. (Equal bytes: equal
    // fingerprints.)
    for index in 1..chain.len() {
        if let Some(first) = chain[..index].iter().position(|c| *c == chain[index]) {
            return Err(ChainError::Duplicate { index, first });
        }
    }
    let certs: Vec<&Cert<'_>> = std::iter::once(&leaf)
        .chain(cas.iter().map(|c| c.cert()))
        .collect();

    let is_precert = leaf
        .is_precertificate()
        .map_err(ChainError::InvalidPoison)?;
    match (kind, is_precert) {
        (ChainKind::Certificate, true) => return Err(ChainError::PrecertificateToAddChain),
        (ChainKind::Precertificate, false) => return Err(ChainError::CertificateToAddPreChain),
        _ => {}
    }
    check_policy(&leaf, policy, now_ms)?;

    // RFC 6962 §3.1: a valid signature chain, using the intermediates as submitted.
    // Checked in the order that costs a made-up chain least (#62): every signature
    // check comes after everything that needs none, and they run from the root down,
    // so the first key used is an accepted root's, and each next one was certified by
    // the one before. A chain that does not reach a root, or holds a key no root program
    // allows, costs no signature work; one that names a root costs one check under it.
    //
    // 1. Names: each certificate names the next as its issuer (Go's verifier compares
    //    the raw names too: RawIssuer, RawSubject).
    for (index, pair) in certs.windows(2).enumerate() {
        check_names(pair[0], index, pair[1])?;
    }
    // 2. The last certificate is an accepted root, or one of its issuer's name is.
    let last = certs.len() - 1;
    let last_is_root = match cas.last() {
        Some(ca) => roots.contains(&ca.fingerprint),
        None => roots.contains(&Sha256::digest(&chain[0]).into()),
    };
    if !last_is_root && !roots.by_subject.contains_key(certs[last].issuer) {
        return Err(ChainError::NoRoot {
            index: last,
            issuer: certs[last].issuer_name(),
            why: "no accepted root has that name".into(),
        });
    }
    // 3. Every submitted key that will verify a signature is one the root programs
    //    allow (the roots' own keys are the operator's choice).
    for (c, ca) in cas.iter().enumerate() {
        if !roots.contains(&ca.fingerprint) {
            check_issuer_key(ca.cert())
                .map_err(|why| ChainError::IssuerKey { index: c + 1, why })?;
        }
    }
    // 4. Signatures, from the root down. The accepted root that issued the last
    //    certificate, when the submitter left it out:
    let appended = if last_is_root {
        None
    } else {
        Some(roots.issuer_of(certs[last], last, cas.last().map(|c| &**c))?)
    };
    for (index, pair) in certs.windows(2).enumerate().rev() {
        // From certificate 1 on, the child is a CA certificate parsed once, which
        // remembers the issuers (by fingerprint) found to have signed it: the same
        // bytes, the same answer.
        let child = index.checked_sub(1).map(|c| &cas[c]);
        if child.is_some_and(|c| c.is_signed_by(&cas[index].fingerprint)) {
            continue;
        }
        check_signed(pair[0], index, pair[1])?;
        if let Some(c) = child {
            c.signed_by(cas[index].fingerprint);
        }
    }

    let mut path: Vec<&Cert<'_>> = certs.clone();
    if let Some(root) = appended {
        path.push(root.cert());
    }
    // RFC 6962 §3.1: a precertificate may be signed by a Precertificate Signing
    // Certificate, a CA certificate with the Certificate Transparency EKU certified
    // directly by the CA that will issue the final certificate.
    let pre_issuer = is_precert && path.get(1).is_some_and(|c| c.is_pre_issuer());
    if pre_issuer && policy.reject_pre_issuers {
        return Err(ChainError::PreIssuerRefused);
    }
    check_issuers(&path, certs.len(), pre_issuer)?;

    // The CA whose key issues the certificate (past a precertificate signing
    // certificate, the CA it speaks for).
    let issuer_at = if pre_issuer { 2 } else { 1 };
    let issuer_key_hash: [u8; 32] = path
        .get(issuer_at)
        .or(path.last())
        .map(|c| Sha256::digest(c.spki).into())
        .unwrap_or_default();
    let entry = if is_precert {
        // The CA that will issue the final certificate must be in the path.
        if path.get(issuer_at).is_none() {
            return Err(match pre_issuer {
                true => ChainError::PreIssuerWithoutIssuer,
                false => ChainError::NoIssuer,
            });
        }
        let pre = pre_issuer.then(|| path[1]);
        SubmittedEntry::Precertificate {
            // RFC 6962 §3.2: the key of the CA that will issue the final certificate.
            issuer_key_hash,
            tbs_certificate: precert_tbs(&leaf, pre)?,
            pre_certificate: chain[0].clone(),
        }
    } else {
        SubmittedEntry::Certificate {
            der: chain[0].clone(),
        }
    };

    let mut issuers: Vec<Vec<u8>> = chain[1..].to_vec();
    let mut fps: Vec<[u8; 32]> = cas.iter().map(|c| c.fingerprint).collect();
    if let Some(root) = appended {
        issuers.push(root.der().to_vec());
        fps.push(root.fingerprint);
    }
    let not_before_ms = leaf.not_before_ms();
    // Only the CA certificates of a chain that validated are kept: a submitter cannot
    // fill the cache with made-up ones.
    for i in parsed_now {
        remember_ca(&cas[i]);
    }
    Ok(ValidatedChain {
        submission: Submission { entry, chain: fps },
        issuers,
        not_before_ms,
        issuer_key_hash,
    })
}

/// How many CA certificates [`cached_ca`] keeps (a CT log sees a few hundred
/// intermediates); when full it starts over.
const CA_CACHE_SIZE: usize = 1024;

/// How many issuers one [`CaCert`] remembers as having signed it.
const SIGNED_BY_SIZE: usize = 8;

/// An issuer certificate (a root, or a CA certificate of a chain that validated),
/// parsed once and kept with its bytes and fingerprint.
struct CaCert {
    cert: OwnedCert,
    /// SHA-256 of the DER.
    fingerprint: [u8; 32],
    /// Fingerprints of the issuers whose signature on this certificate verified: a
    /// signature's validity depends on nothing but these bytes and the issuer's key,
    /// so it is checked once. Leaves are never parsed into a `CaCert`.
    verified_issuers: Mutex<Vec<[u8; 32]>>,
}

self_cell::self_cell!(
    /// A certificate's DER and its parse, borrowing from it.
    struct OwnedCert {
        owner: Box<[u8]>,
        #[covariant]
        dependent: Cert,
    }
);

impl CaCert {
    fn parse(der: Vec<u8>) -> Result<Self, CertError> {
        let fingerprint = Sha256::digest(&der).into();
        Ok(CaCert {
            cert: OwnedCert::try_new(der.into_boxed_slice(), |d| Cert::parse(d))?,
            fingerprint,
            verified_issuers: Mutex::new(Vec::new()),
        })
    }

    fn der(&self) -> &[u8] {
        self.cert.borrow_owner()
    }

    fn cert(&self) -> &Cert<'_> {
        self.cert.borrow_dependent()
    }

    /// Whether the issuer with this fingerprint was found to have signed it.
    fn is_signed_by(&self, issuer: &[u8; 32]) -> bool {
        self.verified_issuers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(issuer)
    }

    /// Remembers that the issuer with this fingerprint signed it.
    fn signed_by(&self, issuer: [u8; 32]) {
        let mut v = self
            .verified_issuers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if v.len() >= SIGNED_BY_SIZE {
            v.clear();
        }
        if !v.contains(&issuer) {
            v.push(issuer);
        }
    }
}

type CaCache = HashMap<Box<[u8]>, Arc<CaCert>, foldhash::fast::RandomState>;

fn ca_cache() -> &'static Mutex<CaCache> {
    static CACHE: OnceLock<Mutex<CaCache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The CA certificate with exactly these bytes, if parsed before in a chain that
/// validated.
fn cached_ca(der: &[u8]) -> Option<Arc<CaCert>> {
    ca_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(der)
        .cloned()
}

fn remember_ca(ca: &Arc<CaCert>) {
    let mut cache = ca_cache().lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= CA_CACHE_SIZE {
        cache.clear();
    }
    cache.insert(ca.der().into(), ca.clone());
}

// ---------------------------------------------------------------------------------------
// Certificates.

/// One extension of a TBSCertificate, as raw slices.
#[derive(Clone, Copy, Debug)]
struct Ext<'a> {
    /// The whole `Extension` SEQUENCE.
    raw: &'a [u8],
    /// The OID's contents.
    oid: &'a [u8],
    critical: bool,
    /// The `extnValue` OCTET STRING's contents.
    value: &'a [u8],
}

/// A parsed certificate: `x509-parser`'s view for the fields it decodes, and raw slices
/// of the submitted DER for whatever is hashed, compared or cut.
struct Cert<'a> {
    x509: X509Certificate<'a>,
    /// The TBSCertificate element, as signed.
    tbs: &'a [u8],
    /// The outer signatureAlgorithm element.
    sig_alg: Tlv<'a>,
    /// The signatureValue BIT STRING's contents (first octet: unused bits).
    signature: &'a [u8],
    /// The TBSCertificate's elements, in order.
    tbs_fields: Vec<Tlv<'a>>,
    /// Which of `tbs_fields` is the issuer.
    issuer_field: usize,
    issuer: &'a [u8],
    subject: &'a [u8],
    spki: &'a [u8],
    extensions: Vec<Ext<'a>>,
    /// Its public key as aws-lc-rs parsed it for the first algorithm it verified
    /// (`verify_fast`); `None` inside if aws-lc-rs refused it.
    fast_key: OnceLock<Option<(SigAlg, aws_lc_rs::signature::ParsedPublicKey)>>,
}

/// Why a certificate is refused before any chain check.
#[derive(Debug)]
enum CertError {
    Malformed(String),
    MismatchedSignatureAlgorithm,
}

impl fmt::Display for CertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertError::Malformed(why) => f.write_str(why),
            CertError::MismatchedSignatureAlgorithm => {
                f.write_str("its signatureAlgorithm differs from its TBSCertificate's")
            }
        }
    }
}

impl CertError {
    fn at(self, index: usize) -> ChainError {
        match self {
            CertError::Malformed(why) => ChainError::Malformed { index, why },
            CertError::MismatchedSignatureAlgorithm => {
                ChainError::MismatchedSignatureAlgorithm { index }
            }
        }
    }
}

impl From<der::DerError> for CertError {
    fn from(e: der::DerError) -> Self {
        CertError::Malformed(e.to_string())
    }
}

impl<'a> Cert<'a> {
    fn parse(der: &'a [u8]) -> Result<Self, CertError> {
        let (rest, x509) =
            X509Certificate::from_der(der).map_err(|e| CertError::Malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CertError::Malformed(
                "trailing bytes after the certificate".into(),
            ));
        }
        let outer = der::read_exact(der, der::SEQUENCE)?;
        let mut r = Reader::new(outer.value);
        let tbs = r.expect(der::SEQUENCE, "no TBSCertificate")?;
        let sig_alg = r.expect(der::SEQUENCE, "no signatureAlgorithm")?;
        let signature = r.expect(der::BIT_STRING, "no signatureValue")?;
        if !r.is_empty() {
            return Err(CertError::Malformed(
                "trailing elements in the certificate".into(),
            ));
        }
        let tbs_fields = Reader::new(tbs.value).all()?;
        // version [0] is optional (v1); then serialNumber, signature, issuer, validity,
        // subject, subjectPublicKeyInfo (RFC 5280 §4.1).
        let first = usize::from(tbs_fields.first().is_some_and(|f| f.tag == der::CONTEXT_0));
        let expected = [
            der::INTEGER,
            der::SEQUENCE,
            der::SEQUENCE,
            der::SEQUENCE,
            der::SEQUENCE,
            der::SEQUENCE,
        ];
        let fixed = tbs_fields
            .get(first..first + expected.len())
            .filter(|f| f.iter().zip(expected).all(|(t, tag)| t.tag == tag))
            .ok_or_else(|| CertError::Malformed("a malformed TBSCertificate".into()))?;
        let (tbs_sig_alg, issuer, subject, spki) = (fixed[1], fixed[2], fixed[4], fixed[5]);
        let mut extensions = Vec::new();
        for f in &tbs_fields[first + expected.len()..] {
            match f.tag {
                // issuerUniqueID, subjectUniqueID ([1], [2] IMPLICIT BIT STRING)
                0x81 | 0xa1 | 0x82 | 0xa2 => {}
                der::CONTEXT_3 => extensions = parse_extensions(f.value)?,
                _ => {
                    return Err(CertError::Malformed(
                        "an unexpected TBSCertificate field".into(),
                    ));
                }
            }
        }
        // Go's parser (TesseraCT) and Azul refuse these; see
        // certificate-transparency-go#702.
        if tbs_sig_alg.raw != sig_alg.raw {
            return Err(CertError::MismatchedSignatureAlgorithm);
        }
        Ok(Cert {
            x509,
            tbs: tbs.raw,
            sig_alg,
            signature: signature.value,
            tbs_fields,
            issuer_field: first + 2,
            issuer: issuer.raw,
            subject: subject.raw,
            spki: spki.raw,
            extensions,
            fast_key: OnceLock::new(),
        })
    }

    fn extension(&self, oid: &[u8]) -> Option<&Ext<'a>> {
        self.extensions.iter().find(|e| e.oid == oid)
    }

    fn issuer_name(&self) -> String {
        self.x509.issuer().to_string()
    }

    /// notAfter, in milliseconds since the epoch.
    fn not_before_ms(&self) -> i64 {
        self.x509
            .validity()
            .not_before
            .timestamp()
            .saturating_mul(1000)
    }

    fn not_after_ms(&self) -> i64 {
        self.x509
            .validity()
            .not_after
            .timestamp()
            .saturating_mul(1000)
    }

    /// Issued by its own subject (RFC 5280 §6.1: such certificates do not count
    /// against a pathLenConstraint).
    fn is_self_issued(&self) -> bool {
        self.issuer == self.subject
    }

    /// basicConstraints: (cA, pathLenConstraint), if the extension is there and parses.
    fn basic_constraints(&self) -> Option<(bool, Option<u32>)> {
        match self.x509.basic_constraints() {
            Ok(Some(bc)) => Some((bc.value.ca, bc.value.path_len_constraint)),
            _ => None,
        }
    }

    /// The extKeyUsage OIDs (contents), `None` without the extension.
    fn ext_key_usages(&self) -> Result<Option<Vec<&'a [u8]>>, der::DerError> {
        let Some(ext) = self.extension(OID_EKU) else {
            return Ok(None);
        };
        let seq = der::read_exact(ext.value, der::SEQUENCE)?;
        let mut out = Vec::new();
        for t in Reader::new(seq.value).all()? {
            if t.tag != der::OID {
                return Err(der::DerError("a key purpose that is not an OID"));
            }
            out.push(t.value);
        }
        Ok(Some(out))
    }

    /// RFC 6962 §3.1: a precertificate carries the poison extension, critical, whose
    /// value is ASN.1 NULL.
    fn is_precertificate(&self) -> Result<bool, &'static str> {
        match self.extension(OID_CT_POISON) {
            None => Ok(false),
            Some(e) if !e.critical => Err("it is not critical"),
            Some(e) if e.value != [0x05, 0x00] => Err("its value is not ASN.1 NULL"),
            Some(_) => Ok(true),
        }
    }

    /// RFC 6962 §3.1: a Precertificate Signing Certificate is a CA certificate whose
    /// extKeyUsage lists Certificate Transparency (as TesseraCT decides it: the OID as
    /// an extension of its own, not in extKeyUsage, does not count).
    fn is_pre_issuer(&self) -> bool {
        let is_ca = self.basic_constraints().is_some_and(|(ca, _)| ca);
        is_ca
            && self
                .ext_key_usages()
                .ok()
                .flatten()
                .is_some_and(|ekus| ekus.contains(&OID_CT_EKU))
    }
}

fn parse_extensions(contents: &[u8]) -> Result<Vec<Ext<'_>>, CertError> {
    let seq = der::read_exact(contents, der::SEQUENCE)?;
    let mut out: Vec<Ext<'_>> = Vec::new();
    let mut r = Reader::new(seq.value);
    while let Some(e) = r.next_tlv()? {
        if e.tag != der::SEQUENCE {
            return Err(CertError::Malformed(
                "an extension that is not a SEQUENCE".into(),
            ));
        }
        let mut er = Reader::new(e.value);
        let oid = er.expect(der::OID, "an extension without an OID")?;
        let critical = match er.optional(der::BOOLEAN)? {
            None => false,
            Some(b) if b.value.len() == 1 => b.value[0] != 0,
            Some(_) => return Err(CertError::Malformed("a malformed critical flag".into())),
        };
        let value = er.expect(der::OCTET_STRING, "an extension without a value")?;
        if !er.is_empty() {
            return Err(CertError::Malformed(
                "trailing bytes in an extension".into(),
            ));
        }
        // RFC 5280 §4.2: at most one instance of an extension (Go refuses others).
        if out.iter().any(|x| x.oid == oid.value) {
            return Err(CertError::Malformed(format!(
                "extension {} appears twice",
                oid_name(oid.value)
            )));
        }
        out.push(Ext {
            raw: e.raw,
            oid: oid.value,
            critical,
            value: value.value,
        });
    }
    Ok(out)
}

fn oid_name(contents: &[u8]) -> String {
    der::oid_to_string(contents).unwrap_or_else(|| "(a malformed OID)".into())
}

// ---------------------------------------------------------------------------------------
// Path checks.

/// `issuer` (certificate `index + 1`) is named as `child`'s (certificate `index`)
/// issuer, byte for byte.
fn check_names(child: &Cert<'_>, index: usize, issuer: &Cert<'_>) -> Result<(), ChainError> {
    if child.issuer != issuer.subject {
        return Err(ChainError::NotIssuer {
            index,
            why: format!(
                "its issuer \"{}\" is not certificate {}'s subject",
                child.issuer_name(),
                index + 1
            ),
        });
    }
    Ok(())
}

/// `issuer` (certificate `index + 1`) signed `child` (certificate `index`).
fn check_signed(child: &Cert<'_>, index: usize, issuer: &Cert<'_>) -> Result<(), ChainError> {
    verify_signed_by(child, issuer).map_err(|e| match e {
        VerifyError::Unsupported(algorithm) => {
            ChainError::UnsupportedAlgorithm { index, algorithm }
        }
        VerifyError::Invalid(why) => ChainError::NotIssuer {
            index,
            why: format!("the signature does not verify ({why})"),
        },
    })
}

/// Whether `cert`'s public key is one a CA of the root programs may have (Mozilla's
/// Root Store Policy §5.1, the CA/Browser Forum's Baseline Requirements §6.1.5–6.1.6),
/// so what verifying under it costs is bounded before any signature is checked: RSA
/// of at most [`MAX_ISSUER_RSA_BITS`] bits with an odd exponent of 3 to 2^32 − 1 (the
/// Baseline Requirements allow up to 2^256 − 1; CAs use 65537, and a wider exponent
/// only makes a check slower); ECDSA on P-256, P-384 or P-521 (P-521 is out of the
/// root programs today, but older CAs and Azul's test chains use it, and it is only
/// ever verified under a key a root certified); Ed25519. Other algorithms fail later
/// with the signature algorithm's own error.
fn check_issuer_key(cert: &Cert<'_>) -> Result<(), String> {
    let bad = |why: &str| why.to_string();
    let spki = der::read_exact(cert.spki, der::SEQUENCE).map_err(|e| e.to_string())?;
    let mut r = Reader::new(spki.value);
    let alg = r
        .expect(der::SEQUENCE, "no key algorithm")
        .map_err(|e| e.to_string())?;
    let bits = r
        .expect(der::BIT_STRING, "no public key")
        .map_err(|e| e.to_string())?;
    let mut ar = Reader::new(alg.value);
    let oid = ar
        .expect(der::OID, "no key algorithm OID")
        .map_err(|e| e.to_string())?;
    if oid.value == OID_RSA_KEY {
        let key = bits.value.get(1..).unwrap_or_default();
        let seq = der::read_exact(key, der::SEQUENCE).map_err(|e| e.to_string())?;
        let mut kr = Reader::new(seq.value);
        let n = kr
            .expect(der::INTEGER, "no RSA modulus")
            .map_err(|e| e.to_string())?;
        let e = kr
            .expect(der::INTEGER, "no RSA exponent")
            .map_err(|e| e.to_string())?;
        let n_bits = unsigned_bits(n.value).ok_or_else(|| bad("a negative RSA modulus"))?;
        let e_bits = unsigned_bits(e.value).ok_or_else(|| bad("a negative RSA exponent"))?;
        if n_bits > MAX_ISSUER_RSA_BITS {
            return Err(format!(
                "an RSA key of {n_bits} bits (at most {MAX_ISSUER_RSA_BITS} are accepted)"
            ));
        }
        let odd = e.value.last().is_some_and(|b| b & 1 == 1);
        if !(2..=32).contains(&e_bits) || !odd {
            return Err(format!(
                "an RSA public exponent of {e_bits} bits{} (an odd exponent of 3 to 2^32 - 1 is accepted)",
                if odd { "" } else { ", even" }
            ));
        }
        return Ok(());
    }
    if oid.value == OID_EC_KEY {
        let curve = ar.next_tlv().map_err(|e| e.to_string())?;
        return match curve {
            Some(c) if c.tag == der::OID && [OID_P256, OID_P384, OID_P521].contains(&c.value) => {
                Ok(())
            }
            Some(c) if c.tag == der::OID => Err(format!(
                "an EC key on curve {}, not P-256, P-384 or P-521",
                oid_name(c.value)
            )),
            _ => Err(bad("an EC key without a named curve")),
        };
    }
    // Ed25519, or an algorithm the signature check names.
    Ok(())
}

/// The bit length of a DER INTEGER's contents taken as unsigned; `None` if negative
/// or empty.
fn unsigned_bits(v: &[u8]) -> Option<usize> {
    let first = *v.first()?;
    if first & 0x80 != 0 {
        return None;
    }
    let v = match v {
        [0, rest @ ..] if !rest.is_empty() => rest,
        _ => v,
    };
    let top = *v.first()?;
    Some(v.len() * 8 - top.leading_zeros() as usize)
}

/// Every intermediate of the path (position 1 on, before the root) is a CA within its
/// pathLenConstraint. The root, always last, is trusted as the operator configured
/// it, as TesseraCT does: an old root without basicConstraints still anchors what its
/// CA issued, and a CT log records what was issued. `submitted` is how many
/// certificates were submitted (the rest was appended).
fn check_issuers(path: &[&Cert<'_>], submitted: usize, pre_issuer: bool) -> Result<(), ChainError> {
    let root = path.len() - 1;
    for (p, cert) in path.iter().enumerate().skip(1).take(root.saturating_sub(1)) {
        let which = if p < submitted {
            PathCert::Submitted(p)
        } else {
            PathCert::AppendedRoot
        };
        let Some((true, max)) = cert.basic_constraints() else {
            return Err(ChainError::NotCa { which });
        };
        if let Some(max) = max {
            // The intermediates below it: not the pre-issuer (position 1 when there is
            // one), not self-issued certificates.
            let first = if pre_issuer { 2 } else { 1 };
            let found = (first..p).filter(|&q| !path[q].is_self_issued()).count();
            if found > max as usize {
                return Err(ChainError::PathLen { which, max, found });
            }
        }
    }
    Ok(())
}

fn check_policy(leaf: &Cert<'_>, policy: &ChainPolicy, now_ms: u64) -> Result<(), ChainError> {
    let not_after = leaf.not_after_ms();
    let at = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
    if let Some(start) = policy.not_after_start
        && not_after < at(start)
    {
        return Err(ChainError::NotAfterTooEarly {
            not_after: rfc3339(not_after),
            start: rfc3339(at(start)),
        });
    }
    if let Some(limit) = policy.not_after_limit
        && not_after >= at(limit)
    {
        return Err(ChainError::NotAfterTooLate {
            not_after: rfc3339(not_after),
            limit: rfc3339(at(limit)),
        });
    }
    let expired = at(now_ms) > not_after;
    if policy.reject_expired && expired {
        return Err(ChainError::Expired {
            not_after: rfc3339(not_after),
        });
    }
    if policy.reject_unexpired && !expired {
        return Err(ChainError::NotExpired {
            not_after: rfc3339(not_after),
        });
    }
    // Named (a String each) only when the operator rejects some: every add passes here.
    if !policy.rejected_extensions.is_empty() {
        for e in &leaf.extensions {
            let oid = oid_name(e.oid);
            if policy.rejected_extensions.contains(&oid) {
                return Err(ChainError::RejectedExtension { oid });
            }
        }
    }
    if !policy.allowed_ekus.is_empty() && !policy.allowed_ekus.iter().any(|o| o == ANY_EKU) {
        let allowed = matches!(leaf.ext_key_usages(), Ok(Some(ekus))
            if ekus.iter().any(|o| policy.allowed_ekus.contains(&oid_name(o))));
        if !allowed {
            return Err(ChainError::ExtKeyUsage {
                allowed: policy.allowed_ekus.join(", "),
            });
        }
    }
    Ok(())
}

/// Whether the DER `der` is one certificate, as `issuer/<hex>` must hold (a copy's
/// check of the issuers it stores: `tlogd migrate`).
pub fn check_certificate(der: &[u8]) -> Result<(), String> {
    Cert::parse(der).map(|_| ()).map_err(|e| e.to_string())
}

/// Check a logged precertificate entry against the precertificate it keeps (a copy's
/// check, `tlogd migrate`): the leaf hash covers the TBSCertificate and the issuer's key
/// hash, not the `pre_certificate` beside them, from which a log's dedup index is
/// built. The TBSCertificate `pre_certificate` gives (through the precertificate
/// signing certificate `issuers[0]`, when it is one) must be `tbs`, and
/// `issuer_key_hash` the SHA-256 of the key of the CA that issues the final
/// certificate (`issuers[0]`, or `issuers[1]` past a precertificate signing
/// certificate). `issuers`: the entry's chain, in order.
pub fn check_logged_precertificate(
    pre_certificate: &[u8],
    issuers: &[&[u8]],
    tbs: &[u8],
    issuer_key_hash: &[u8; 32],
) -> Result<(), String> {
    let leaf = Cert::parse(pre_certificate).map_err(|e| format!("pre_certificate: {e}"))?;
    let parsed: Vec<Cert<'_>> = issuers
        .iter()
        .take(2)
        .enumerate()
        .map(|(i, d)| Cert::parse(d).map_err(|e| format!("issuer {i}: {e}")))
        .collect::<Result<_, _>>()?;
    let pre = parsed.first().filter(|c| c.is_pre_issuer());
    let key_holder = parsed
        .get(usize::from(pre.is_some()))
        .ok_or("no issuer of the final certificate in the chain")?;
    if precert_tbs(&leaf, pre).map_err(|e| e.to_string())? != tbs {
        return Err("its pre_certificate does not give its TBSCertificate".into());
    }
    if Sha256::digest(key_holder.spki)[..] != issuer_key_hash[..] {
        return Err("its issuer_key_hash is not its chain's issuer's key".into());
    }
    Ok(())
}

/// The TBSCertificate a precertificate entry logs: the precertificate's, with the
/// poison extension removed; when it was signed by a Precertificate Signing Certificate,
/// also with that certificate's issuer as issuer and its authorityKeyIdentifier
/// extension instead of the precertificate's (removed if it has none; appended if only
/// it has one), so that the TBS is the final certificate's.
///
/// Cut from the submitted bytes: only the outer SEQUENCE, the extensions' `[3]` and
/// SEQUENCE headers and a replaced authorityKeyIdentifier are written anew. If the
/// poison was the only extension, the extensions field is omitted, as Go's
/// `x509util.BuildPrecertTBS` (TesseraCT, `omitempty`) encodes it.
fn precert_tbs(leaf: &Cert<'_>, pre_issuer: Option<&Cert<'_>>) -> Result<Vec<u8>, ChainError> {
    // Outer None: no pre-issuer, leave the AKI; Some(None): remove it; Some(Some(v)): use v.
    let new_aki: Option<Option<&[u8]>> = pre_issuer.map(|p| p.extension(OID_AKI).map(|e| e.value));
    let mut exts: Vec<Cow<'_, [u8]>> = Vec::with_capacity(leaf.extensions.len());
    let mut poisons = 0;
    let mut aki_seen = false;
    for e in &leaf.extensions {
        if e.oid == OID_CT_POISON {
            poisons += 1;
            continue;
        }
        if e.oid == OID_AKI
            && let Some(replacement) = new_aki
        {
            aki_seen = true;
            if let Some(value) = replacement {
                exts.push(Cow::Owned(aki_extension(e.critical, value)));
            }
            continue;
        }
        exts.push(Cow::Borrowed(e.raw));
    }
    if poisons != 1 {
        return Err(ChainError::Tbs(format!("{poisons} poison extensions")));
    }
    if let Some(Some(value)) = new_aki
        && !aki_seen
    {
        exts.push(Cow::Owned(aki_extension(false, value)));
    }

    let mut fields: Vec<Cow<'_, [u8]>> = Vec::with_capacity(leaf.tbs_fields.len());
    for (i, f) in leaf.tbs_fields.iter().enumerate() {
        if i == leaf.issuer_field
            && let Some(p) = pre_issuer
        {
            fields.push(Cow::Borrowed(p.issuer));
        } else if f.tag == der::CONTEXT_3 {
            if !exts.is_empty() {
                let seq = der::wrap(der::SEQUENCE, &exts);
                fields.push(Cow::Owned(der::wrap(der::CONTEXT_3, &[seq])));
            }
        } else {
            fields.push(Cow::Borrowed(f.raw));
        }
    }
    Ok(der::wrap(der::SEQUENCE, &fields))
}

/// An authorityKeyIdentifier Extension with this extnValue content (the critical flag
/// written only when true: DER omits a BOOLEAN at its DEFAULT).
fn aki_extension(critical: bool, value: &[u8]) -> Vec<u8> {
    let oid = der::wrap(der::OID, &[OID_AKI]);
    let octets = der::wrap(der::OCTET_STRING, &[value]);
    if critical {
        der::wrap(der::SEQUENCE, &[&oid[..], &[0x01, 0x01, 0xff], &octets])
    } else {
        der::wrap(der::SEQUENCE, &[&oid, &octets])
    }
}

// ---------------------------------------------------------------------------------------
// PEM and times.

enum PemBlock {
    Block {
        label: String,
        body: Result<Vec<u8>, String>,
    },
    Unterminated {
        label: String,
    },
}

/// The blocks of a PEM text (RFC 7468), in order; text outside blocks (comments in a
/// bundle) is ignored, as are RFC 1421 header lines inside one.
fn pem_blocks(pem: &[u8]) -> Vec<PemBlock> {
    let text = String::from_utf8_lossy(pem);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(label) = lines[i]
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            i += 1;
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut j = i + 1;
        let mut ended = false;
        while j < lines.len() {
            let line = lines[j];
            if line == end {
                ended = true;
                break;
            }
            if line.starts_with("-----BEGIN ") {
                break;
            }
            if !line.contains(':') {
                body.push_str(line);
            }
            j += 1;
        }
        let label = label.to_string();
        if ended {
            let body = base64::engine::general_purpose::STANDARD
                .decode(body.as_bytes())
                .map_err(|e| e.to_string());
            out.push(PemBlock::Block { label, body });
            i = j + 1;
        } else {
            out.push(PemBlock::Unterminated { label });
            i = j;
        }
    }
    out
}

/// Milliseconds since the epoch as an RFC 3339 UTC time, for messages.
fn rfc3339(ms: i64) -> String {
    tlogd_core::time::format_rfc3339_ms(ms)
}

#[cfg(test)]
mod tests;
