//! A log's keys by their type: the signed-note core ([`crate::note`]) knows Ed25519;
//! each other scheme plugs into it ([`crate::note::SignatureCheck`],
//! [`crate::note::LogSigner`]). This module is where a key string's type byte picks the
//! scheme, so the core never imports one.

use std::sync::Arc;

use crate::mldsa::{ALG_MLDSA44, MlDsa44Signer, MlDsa44Verifier};
use crate::note::{
    LogSigner, NoteError, NoteSigner, NoteVerifier, SignatureAlgorithm, parse_skey, split_key,
};

/// signed-note "Signature types": Ed25519.
const ALG_ED25519: u8 = 0x01;

impl NoteVerifier {
    /// Parse a verifier key `<name>+<hex key id>+<base64(signature type || public key)>`,
    /// of a signature type a log signs with: Ed25519 (`0x01`) or ML-DSA-44 (`0x06`,
    /// tlog-checkpoint "Signatures": a log's ML-DSA-44 signature is a type-0x06
    /// cosignature by its own key). The key ID must match the key.
    pub fn from_vkey(s: &str) -> Result<Self, NoteError> {
        let (_, _, raw) = split_key(s)?;
        match raw.first().copied().and_then(SignatureAlgorithm::from_byte) {
            Some(SignatureAlgorithm::Ed25519) => NoteVerifier::from_ed25519_vkey(s),
            Some(SignatureAlgorithm::CosignatureMlDsa44) => Ok(NoteVerifier::from_mldsa44(
                Arc::new(MlDsa44Verifier::from_vkey(s)?),
            )),
            Some(_) => Err(NoteError::BadKey(
                "signature type not supported for log keys (Ed25519, 0x01, or ML-DSA-44, 0x06)",
            )),
            None => Err(NoteError::BadKey("unknown signature type")),
        }
    }
}

/// A log's checkpoint signer from its private key string, of the type the key names:
/// Ed25519 (`0x01`, [`NoteSigner`]) or ML-DSA-44 (`0x06`, [`MlDsa44Signer`]). The key
/// ID must match the key.
pub fn log_signer_from_skey(s: &str) -> Result<Arc<dyn LogSigner>, NoteError> {
    let (_, _, raw) = parse_skey(s)?;
    match raw.first().copied() {
        Some(ALG_ED25519) => Ok(Arc::new(NoteSigner::from_skey(s)?)),
        Some(ALG_MLDSA44) => Ok(Arc::new(MlDsa44Signer::from_skey(s)?)),
        _ => Err(NoteError::BadKey(
            "not a log private key (Ed25519, 0x01, or ML-DSA-44, 0x06)",
        )),
    }
}
