//! Checkpoint cosignatures (C2SP tlog-cosignature): the Ed25519 type (signed-note
//! signature type `0x04`, message `cosignature/v1`) here, the ML-DSA-44 type (`0x06`,
//! message `subtree/v1`) in [`crate::mldsa`]. [`CosignatureVerifier`] verifies either:
//! a witness policy may name witnesses of both types.
//!
//! A cosignature is a note signature line on a checkpoint whose signature bytes are a
//! `timestamped_signature` (tlog-cosignature "Format"): an 8-byte big-endian POSIX
//! timestamp, then the signature. For Ed25519 it signs the "Ed25519 signed message":
//!
//! ```text
//! cosignature/v1
//! time <timestamp>
//! <the checkpoint's note text, final newline included>
//! ```
//!
//! The key ID is `SHA-256(<name> || "\n" || 0x04 || public key)[:4]`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use std::sync::Arc;

use crate::mldsa::{ALG_MLDSA44, MlDsa44Verifier};
use crate::note::{
    NoteError, NoteSignature, SignatureAlgorithm, parse_typed_vkey, split_key, typed_key_id,
    typed_vkey, valid_name,
};

/// signed-note "Signature types": timestamped Ed25519 checkpoint cosignatures.
pub const ALG_COSIGNATURE_V1: u8 = 0x04;

/// tlog-cosignature: a timestamp MUST NOT exceed 2^63 - 1.
const MAX_TIMESTAMP: u64 = (1 << 63) - 1;

fn cosigner_key_id(name: &str, key: &VerifyingKey) -> u32 {
    typed_key_id(name, ALG_COSIGNATURE_V1, key)
}

/// tlog-cosignature "Ed25519 signed message" for a checkpoint's note `text`.
pub fn signed_message(text: &str, timestamp: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(40 + text.len());
    m.extend_from_slice(b"cosignature/v1\ntime ");
    m.extend_from_slice(timestamp.to_string().as_bytes());
    m.push(b'\n');
    m.extend_from_slice(text.as_bytes());
    m
}

/// A witness's (cosigner's) public key: `name+hex key id+base64(0x04 || Ed25519 key)`
/// or `name+hex key id+base64(0x06 || ML-DSA-44 key)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CosignatureVerifier {
    name: String,
    id: u32,
    key: CosignerKey,
}

/// The public key of a [`CosignatureVerifier`], by signature type.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CosignerKey {
    /// `0x04`: timestamped Ed25519 checkpoint cosignatures.
    Ed25519(VerifyingKey),
    /// `0x06`: timestamped ML-DSA-44 (sub)tree cosignatures.
    MlDsa44(Arc<MlDsa44Verifier>),
}

impl CosignatureVerifier {
    /// Parse a cosigner vkey of signature type `0x04` (Ed25519) or `0x06` (ML-DSA-44);
    /// the key ID must match the key.
    pub fn from_vkey(s: &str) -> Result<Self, NoteError> {
        let (_, _, raw) = split_key(s)?;
        match raw.first().copied() {
            Some(ALG_COSIGNATURE_V1) => {
                let (name, id, key) = parse_typed_vkey(
                    s,
                    ALG_COSIGNATURE_V1,
                    "not an Ed25519 cosignature (type 0x04) verifier key",
                )?;
                Ok(CosignatureVerifier {
                    name: name.to_string(),
                    id,
                    key: CosignerKey::Ed25519(key),
                })
            }
            Some(ALG_MLDSA44) => Ok(Self::from_mldsa44(Arc::new(MlDsa44Verifier::from_vkey(s)?))),
            _ => Err(NoteError::BadKey(
                "not a cosigner verifier key (type 0x04, Ed25519, or 0x06, ML-DSA-44)",
            )),
        }
    }

    /// The verifier of an ML-DSA-44 cosigner (signature type `0x06`).
    pub fn from_mldsa44(key: Arc<MlDsa44Verifier>) -> Self {
        CosignatureVerifier {
            name: key.name().to_string(),
            id: key.key_id(),
            key: CosignerKey::MlDsa44(key),
        }
    }

    /// The vkey string.
    pub fn to_vkey(&self) -> String {
        match &self.key {
            CosignerKey::Ed25519(key) => typed_vkey(&self.name, self.id, ALG_COSIGNATURE_V1, key),
            CosignerKey::MlDsa44(key) => key.to_vkey(),
        }
    }

    /// The signature type: [`SignatureAlgorithm::CosignatureEd25519`] or
    /// [`SignatureAlgorithm::CosignatureMlDsa44`].
    pub fn algorithm(&self) -> SignatureAlgorithm {
        match &self.key {
            CosignerKey::Ed25519(_) => SignatureAlgorithm::CosignatureEd25519,
            CosignerKey::MlDsa44(_) => SignatureAlgorithm::CosignatureMlDsa44,
        }
    }

    /// The cosigner's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.id
    }

    /// The public key (32 bytes for Ed25519, 1312 for ML-DSA-44): two vkeys wrapping
    /// the same key are duplicates in a tlog-policy ("even if they differ by key name
    /// and key id").
    pub fn public_key(&self) -> &[u8] {
        match &self.key {
            CosignerKey::Ed25519(key) => key.as_bytes(),
            CosignerKey::MlDsa44(key) => key.public_key(),
        }
    }

    /// Whether `sig` is a line from this cosigner (name and key ID match).
    pub fn matches(&self, sig: &NoteSignature) -> bool {
        sig.name == self.name && sig.key_id == self.id
    }

    /// Verify a cosignature line of this cosigner over the checkpoint note `text`;
    /// returns its timestamp (POSIX seconds). An ML-DSA-44 cosignature may carry 0 ("no
    /// statement" about time, tlog-cosignature), which a witness's answer to
    /// add-checkpoint must not: see [`CosignatureVerifier::verify_witnessed`].
    pub fn verify(&self, text: &str, sig: &NoteSignature) -> Result<u64, NoteError> {
        let bad = || NoteError::BadSignature(self.name.clone());
        if !self.matches(sig) {
            return Err(bad());
        }
        let key = match &self.key {
            CosignerKey::Ed25519(key) => key,
            CosignerKey::MlDsa44(key) => return key.verify_checkpoint(text, &sig.signature),
        };
        if sig.signature.len() != 8 + 64 {
            return Err(bad());
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&sig.signature[..8]);
        let timestamp = u64::from_be_bytes(ts);
        if timestamp > MAX_TIMESTAMP {
            return Err(bad());
        }
        let signature =
            ed25519_dalek::Signature::from_slice(&sig.signature[8..]).map_err(|_| bad())?;
        key.verify_strict(&signed_message(text, timestamp), &signature)
            .map_err(|_| bad())?;
        Ok(timestamp)
    }

    /// [`verify`](CosignatureVerifier::verify) a witness's cosignature of a checkpoint,
    /// and refuse timestamp 0: tlog-witness "add-checkpoint" says "The cosignature MUST
    /// NOT omit the timestamp, i.e. the timestamp MUST NOT be zero", so such a line
    /// states nothing about when the witness saw the tree and does not count.
    pub fn verify_witnessed(&self, text: &str, sig: &NoteSignature) -> Result<u64, NoteError> {
        match self.verify(text, sig)? {
            0 => Err(NoteError::BadSignature(format!(
                "{} (timestamp 0: a witness's cosignature must carry the time)",
                self.name
            ))),
            t => Ok(t),
        }
    }
}

/// A cosigner's private key (used by witnesses; tlogd itself only verifies):
/// `PRIVATE+KEY+<name>+<hex key id>+<base64(0x04 || 32-byte seed)>`.
pub struct CosignatureSigner {
    name: String,
    id: u32,
    key: SigningKey,
}

impl std::fmt::Debug for CosignatureSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CosignatureSigner({}+{:08x})", self.name, self.id)
    }
}

impl CosignatureSigner {
    /// Parse a cosigner private key.
    pub fn from_skey(s: &str) -> Result<Self, NoteError> {
        let (name, id, key) = crate::note::parse_ed25519_skey(
            s,
            ALG_COSIGNATURE_V1,
            "not an Ed25519 cosignature (type 0x04) private key",
            cosigner_key_id,
        )?;
        Ok(CosignatureSigner { name, id, key })
    }

    /// The matching verifier.
    pub fn verifier(&self) -> CosignatureVerifier {
        CosignatureVerifier {
            name: self.name.clone(),
            id: self.id,
            key: CosignerKey::Ed25519(self.key.verifying_key()),
        }
    }

    /// Cosign the checkpoint note `text` as of `timestamp` (POSIX seconds).
    pub fn cosign(&self, text: &str, timestamp: u64) -> NoteSignature {
        let sig = self.key.sign(&signed_message(text, timestamp)).to_bytes();
        let mut signature = Vec::with_capacity(8 + 64);
        signature.extend_from_slice(&timestamp.to_be_bytes());
        signature.extend_from_slice(&sig);
        NoteSignature {
            name: self.name.clone(),
            key_id: self.id,
            signature,
        }
    }
}

/// Generate a cosigner key named `name`: `(private key, verifier key)` strings.
pub fn generate_cosigner_key(name: &str) -> Result<(String, String), NoteError> {
    if !valid_name(name) {
        return Err(NoteError::BadKey("invalid key name"));
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| NoteError::Random(e.to_string()))?;
    let key = SigningKey::from_bytes(&seed);
    let id = cosigner_key_id(name, &key.verifying_key());
    let mut b = Vec::with_capacity(33);
    b.push(ALG_COSIGNATURE_V1);
    b.extend_from_slice(&seed);
    let skey = format!("PRIVATE+KEY+{name}+{id:08x}+{}", B64.encode(&b));
    let vkey = CosignatureSigner::from_skey(&skey)?.verifier().to_vkey();
    Ok((skey, vkey))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::note::{Note, NoteSigner, open_note};

    const SKEY: &str = "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";

    #[test]
    fn the_signed_message_is_the_spec_example_layout() {
        let text =
            "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        assert_eq!(
            signed_message(text, 1679315147),
            b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        );
    }

    #[test]
    fn cosign_verify_and_coexist_with_the_log_signature() {
        let (sk, vk) = generate_cosigner_key("witness.example/w1").unwrap();
        let w = CosignatureSigner::from_skey(&sk).unwrap();
        let v = CosignatureVerifier::from_vkey(&vk).unwrap();
        assert_eq!(v, w.verifier());
        assert_eq!(v.to_vkey(), vk);
        let log = NoteSigner::from_skey(SKEY).unwrap();
        let text = "example.com/log/testdata\n3\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n";
        let mut note = Note::parse(&crate::note::sign_note(text, &[&log]).unwrap()).unwrap();
        note.signatures.push(w.cosign(text, 1_700_000_000));
        let bytes = note.to_bytes();
        // The log's verifier ignores the cosignature; the cosigner's verifies it.
        assert!(open_note(&bytes, &[&log.verifier()]).is_ok());
        let parsed = Note::parse(&bytes).unwrap();
        let cosig = parsed.signatures.iter().find(|s| v.matches(s)).unwrap();
        assert_eq!(v.verify(&parsed.text, cosig), Ok(1_700_000_000));
        // Another text, another time, or another key: no.
        assert!(v.verify("other\n", cosig).is_err());
        let mut later = cosig.clone();
        later.signature[7] ^= 1;
        assert!(v.verify(&parsed.text, &later).is_err());
        let (_, other) = generate_cosigner_key("witness.example/w1").unwrap();
        let other = CosignatureVerifier::from_vkey(&other).unwrap();
        assert!(other.verify(&parsed.text, cosig).is_err());
        // A log key (type 0x01) is not a cosigner key.
        assert!(CosignatureVerifier::from_vkey(&log.verifier().to_vkey()).is_err());
    }

    #[test]
    fn mldsa44_cosigners_verify_and_witnesses_must_timestamp() {
        use crate::mldsa::{MlDsa44Signer, generate_mldsa44_key};
        let (sk, vk) = generate_mldsa44_key("witness.example/pq").unwrap();
        let w = MlDsa44Signer::from_skey(&sk).unwrap();
        let v = CosignatureVerifier::from_vkey(&vk).unwrap();
        assert_eq!(v.algorithm(), SignatureAlgorithm::CosignatureMlDsa44);
        assert_eq!(v.to_vkey(), vk);
        assert_eq!(v.public_key().len(), crate::mldsa::PUBLIC_KEY_LEN);
        assert_eq!(v, CosignatureVerifier::from_mldsa44(w.mldsa44_verifier()));
        let text = "example.com/log/testdata\n3\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n";
        let cosig = w.cosign(text, 1_700_000_000).unwrap();
        assert!(v.matches(&cosig));
        assert_eq!(v.verify(text, &cosig), Ok(1_700_000_000));
        assert_eq!(v.verify_witnessed(text, &cosig), Ok(1_700_000_000));
        assert!(v.verify("other\n", &cosig).is_err());
        // Timestamp 0 is a valid cosignature ("no statement") but not a witness's.
        let zero = w.cosign(text, 0).unwrap();
        assert_eq!(v.verify(text, &zero), Ok(0));
        assert!(v.verify_witnessed(text, &zero).is_err());
        // Nor for Ed25519 witnesses.
        let (esk, evk) = generate_cosigner_key("witness.example/ed").unwrap();
        let ed = CosignatureSigner::from_skey(&esk).unwrap();
        let ev = CosignatureVerifier::from_vkey(&evk).unwrap();
        assert_eq!(ev.algorithm(), SignatureAlgorithm::CosignatureEd25519);
        assert_eq!(ev.public_key().len(), 32);
        assert_eq!(ev.verify(text, &ed.cosign(text, 0)), Ok(0));
        assert!(ev.verify_witnessed(text, &ed.cosign(text, 0)).is_err());
        // Lines of one type never verify as the other.
        assert!(ev.verify(text, &cosig).is_err());
        assert!(v.verify(text, &ed.cosign(text, 5)).is_err());
    }
}
