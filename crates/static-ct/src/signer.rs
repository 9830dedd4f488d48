//! An RFC 6962 log key: ECDSA P-256 over SHA-256 (RFC 6962 §2.1.4), its `LogID`, and
//! signatures as TLS `DigitallySigned` structs.
//!
//! Two ways to sign, chosen by measurement (`benches/benches/ct.rs`):
//! - [`LogKey::sign`] is deterministic (RFC 6979, RustCrypto `p256`): the same input
//!   and key give the same bytes, so a tree head signed twice (a restart, another
//!   frontend) is one signature. Once per checkpoint, its cost does not matter.
//! - [`LogKey::sign_randomized`] (aws-lc-rs, precomputed base-point tables) is ten
//!   times faster (~15 µs; ring ~17) and signs an SCT on every add. Nothing needs an
//!   SCT's signature to repeat: RFC 6962 §4.1's "same SCT" for a resubmission is its
//!   fields (the entry, timestamp, extensions), and any valid signature over them is
//!   that SCT.

use p256::ecdsa::signature::Signer;
use p256::ecdsa::{DerSignature, Signature, SigningKey, VerifyingKey};
use p256::pkcs8::EncodePublicKey;
use sha2::{Digest, Sha256};

use crate::tls::{Reader, put_vec};
use crate::{FormatError, format_error};

/// TLS `HashAlgorithm` `sha256(4)`.
pub const HASH_SHA256: u8 = 4;
/// TLS `SignatureAlgorithm` `ecdsa(3)`.
pub const SIGNATURE_ECDSA: u8 = 3;

/// Why a key cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("log key: {0}")]
pub struct KeyError(String);

/// A log's ECDSA P-256 signing key.
#[derive(Clone)]
pub struct LogKey {
    key: SigningKey,
    /// The same key for aws-lc-rs's faster, randomized signatures.
    fast: std::sync::Arc<aws_lc_rs::signature::EcdsaKeyPair>,
    spki: Vec<u8>,
    log_id: [u8; 32],
}

impl std::fmt::Debug for LogKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LogKey(log_id {}, private key redacted)",
            hex(&self.log_id)
        )
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl LogKey {
    /// The key whose private scalar is `d` (32 bytes, big-endian, in `1..n`).
    pub fn from_scalar(d: &[u8]) -> Result<Self, KeyError> {
        let key = SigningKey::from_slice(d).map_err(|e| KeyError(e.to_string()))?;
        Self::from_signing_key(key)
    }

    /// The key in a PEM file: PKCS#8 (`PRIVATE KEY`, what `tlogd keygen` writes and
    /// `openssl genpkey` gives) or SEC 1 (`EC PRIVATE KEY`, what `openssl ecparam
    /// -genkey` gives and TesseraCT and Sunlight read). Only P-256 keys.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        use p256::pkcs8::DecodePrivateKey;
        let secret = if pem.contains("-----BEGIN EC PRIVATE KEY-----") {
            p256::SecretKey::from_sec1_pem(pem)
                .map_err(|e| KeyError(format!("not a P-256 SEC 1 private key: {e}")))?
        } else if pem.contains("-----BEGIN PRIVATE KEY-----") {
            p256::SecretKey::from_pkcs8_pem(pem)
                .map_err(|e| KeyError(format!("not a P-256 PKCS#8 private key: {e}")))?
        } else {
            return Err(KeyError(
                "no PEM block \"PRIVATE KEY\" or \"EC PRIVATE KEY\" (an unencrypted ECDSA P-256 key)"
                    .into(),
            ));
        };
        Self::from_signing_key(SigningKey::from(secret))
    }

    /// The key as an unencrypted PKCS#8 PEM file.
    pub fn to_pkcs8_pem(&self) -> Result<String, KeyError> {
        use p256::pkcs8::{EncodePrivateKey, LineEnding};
        Ok(p256::SecretKey::from(&self.key)
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| KeyError(e.to_string()))?
            .to_string())
    }

    /// The public key as a PEM `PUBLIC KEY` block (what CT clients are configured with).
    pub fn public_key_pem(&self) -> Result<String, KeyError> {
        use p256::pkcs8::LineEnding;
        p256::PublicKey::from(self.key.verifying_key())
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| KeyError(e.to_string()))
    }

    fn from_signing_key(key: SigningKey) -> Result<Self, KeyError> {
        let spki = p256::PublicKey::from(key.verifying_key())
            .to_public_key_der()
            .map_err(|e| KeyError(e.to_string()))?
            .as_bytes()
            .to_vec();
        let log_id = Sha256::digest(&spki).into();
        let point = key.verifying_key().to_encoded_point(false);
        let fast = aws_lc_rs::signature::EcdsaKeyPair::from_private_key_and_public_key(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &key.to_bytes(),
            point.as_bytes(),
        )
        .map_err(|e| KeyError(format!("aws-lc-rs refuses the key: {e}")))?;
        Ok(LogKey {
            key,
            fast: std::sync::Arc::new(fast),
            spki,
            log_id,
        })
    }

    /// RFC 6962 §3.2 `LogID`: SHA-256 of the public key's DER `SubjectPublicKeyInfo`.
    pub fn log_id(&self) -> [u8; 32] {
        self.log_id
    }

    /// The public key's DER `SubjectPublicKeyInfo` (log lists publish it as `key`).
    pub fn public_key_der(&self) -> &[u8] {
        &self.spki
    }

    /// Sign `message` (hashed with SHA-256): a `DigitallySigned` struct (hash
    /// algorithm, signature algorithm, the DER ECDSA signature with a 16-bit length).
    /// Deterministic (RFC 6979): for tree heads.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        let sig: DerSignature = self.key.sign(message);
        digitally_signed(sig.as_bytes())
    }

    /// [`LogKey::sign`] with a random nonce, through aws-lc-rs: for SCTs, one per add. The
    /// system's random source failing (it does not on Linux after boot) falls back to
    /// the deterministic signature, never to no signature.
    pub fn sign_randomized(&self, message: &[u8]) -> Vec<u8> {
        match self
            .fast
            .sign(&aws_lc_rs::rand::SystemRandom::new(), message)
        {
            Ok(sig) => digitally_signed(sig.as_ref()),
            Err(_) => self.sign(message),
        }
    }
}

/// A `DigitallySigned` struct around a DER ECDSA signature.
fn digitally_signed(der: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 72);
    out.extend_from_slice(&[HASH_SHA256, SIGNATURE_ECDSA]);
    put_vec(&mut out, der, 2);
    out
}

/// Check that `spki` is a DER `SubjectPublicKeyInfo` of an ECDSA P-256 key.
pub fn check_public_key(spki: &[u8]) -> Result<(), KeyError> {
    use p256::pkcs8::DecodePublicKey;
    p256::PublicKey::from_public_key_der(spki)
        .map(|_| ())
        .map_err(|e| KeyError(format!("not an ECDSA P-256 public key: {e}")))
}

/// Check a `DigitallySigned` over `message` by the key whose DER
/// `SubjectPublicKeyInfo` is `spki`; the bytes after the struct are returned. A caller
/// checking many under one key keeps a [`LogVerifier`].
pub fn verify<'a>(spki: &[u8], message: &[u8], signed: &'a [u8]) -> Result<&'a [u8], FormatError> {
    LogVerifier::new(spki)?.verify(message, signed)
}

/// A log's public key, parsed once, that checks its `DigitallySigned` structs (SCTs and
/// tree heads): a verifier of every SCT, as tlog-loadgen is, shares its cores with the
/// log.
#[derive(Clone)]
pub struct LogVerifier {
    key: std::sync::Arc<aws_lc_rs::signature::ParsedPublicKey>,
}

impl std::fmt::Debug for LogVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogVerifier(ECDSA P-256)")
    }
}

impl LogVerifier {
    /// The verifier of the ECDSA P-256 key whose DER `SubjectPublicKeyInfo` is `spki`.
    pub fn new(spki: &[u8]) -> Result<Self, FormatError> {
        use p256::pkcs8::DecodePublicKey;
        let key = p256::PublicKey::from_public_key_der(spki)
            .map_err(|e| format_error("public key", e.to_string()))?;
        let point = VerifyingKey::from(key).to_encoded_point(false);
        let key = aws_lc_rs::signature::ParsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1,
            point.as_bytes(),
        )
        .map_err(|e| format_error("public key", e.to_string()))?;
        Ok(LogVerifier {
            key: std::sync::Arc::new(key),
        })
    }

    /// Check a `DigitallySigned` over `message`; the bytes after the struct are
    /// returned.
    pub fn verify<'a>(&self, message: &[u8], signed: &'a [u8]) -> Result<&'a [u8], FormatError> {
        let mut r = Reader::new(signed, "DigitallySigned");
        let algorithms = r.take(2)?;
        if algorithms != [HASH_SHA256, SIGNATURE_ECDSA] {
            return Err(format_error(
                "DigitallySigned",
                format!("algorithms {algorithms:02x?}, not SHA-256 with ECDSA"),
            ));
        }
        let der = r.vec(2, 1)?;
        let rest = &signed[r.position()..];
        // Parsed as DER first, so that what is accepted does not depend on how lax the
        // library's own parser is.
        Signature::from_der(der).map_err(|e| format_error("DigitallySigned", e.to_string()))?;
        self.key
            .verify_sig(message, der)
            .map_err(|_| format_error("DigitallySigned", "the signature does not verify"))?;
        Ok(rest)
    }
}
