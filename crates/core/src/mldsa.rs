//! ML-DSA-44 (FIPS 204) keys and timestamped (sub)tree cosignatures: signed-note
//! signature type `0x06` (signed-note "Signature types"; C2SP tlog-cosignature
//! "Format" and "ML-DSA-44 signed message").
//!
//! One signature type serves three roles here:
//!
//! * the log's own checkpoint signature (tlog-checkpoint "Signatures": "Logs SHOULD use
//!   ML-DSA-44 cosignatures to sign the checkpoint"): [`MlDsa44Signer`] is a
//!   [`LogSigner`], and [`NoteVerifier::from_vkey`] accepts type `0x06` keys;
//! * a witness's cosignature of a checkpoint (tlog-witness "add-checkpoint"):
//!   [`CosignatureVerifier`](crate::cosignature::CosignatureVerifier) accepts type
//!   `0x06` keys, so witness policies may name ML-DSA-44 witnesses;
//! * a subtree cosignature (tlog-witness "sign-subtree"): [`MlDsa44Signer::sign_subtree`]
//!   and [`MlDsa44Verifier::verify_subtree`].
//!
//! The bytes of a signature line after its 4-byte key ID are a `timestamped_signature`
//! (tlog-cosignature "Format"): an 8-byte big-endian timestamp in POSIX seconds, then
//! the 2420-byte ML-DSA-44 signature of the `cosigned_message`
//! (tlog-cosignature "ML-DSA-44 signed message", TLS presentation language):
//!
//! ```text
//! struct {
//!     uint8 label[12] = "subtree/v1\n\0";
//!     opaque cosigner_name<1..2^8-1>;
//!     uint64 timestamp;
//!     opaque log_origin<1..2^8-1>;
//!     uint64 start;
//!     uint64 end;
//!     uint8 hash[32];
//! } cosigned_message;
//! ```
//!
//! For a checkpoint, `start` is 0, `end` its size and `hash` its root. Signatures are
//! "pure" ML-DSA (FIPS 204 Algorithms 2 and 3, not HashML-DSA) with the empty context
//! string, as torchwood and transparency-dev/formats make them; signing is hedged (fresh
//! randomness in every signature, the FIPS 204 default). The extension lines of a
//! checkpoint are not in the message ("no statement is made about them"), so this
//! module neither signs nor accepts a checkpoint that has any: a verified note's text
//! would otherwise carry lines no signature covers.
//!
//! Keys: the public key is the 1312-byte FIPS 204 `pkEncode`; the key ID is
//! `SHA-256(<name> || "\n" || 0x06 || public key)[:4]` (tlog-cosignature "Format");
//! a verifier key is `<name>+<hex key id>+base64(0x06 || public key)`. A private key
//! is `PRIVATE+KEY+<name>+<hex key id>+base64(0x06 || 32-byte seed)`, the FIPS 204
//! key-generation seed ξ: C2SP does not specify private keys, and this is the shape
//! transparency-dev/formats writes (`GenerateMLDSAKey`) and tlogd's Ed25519 keys have.
//! Names are at most 255 bytes: the message carries them with a one-byte length.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ml_dsa::{EncodedVerifyingKey, ExpandedSigningKey, MlDsa44, Signature, VerifyingKey};

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::hash::Hash;
use crate::note::{
    LogSigner, NoteError, NoteSignature, NoteVerifier, SignatureAlgorithm, SignatureCheck, key_id,
    parse_skey, split_key, valid_name,
};
pub use crate::subtree::{
    LABEL, MAX_NAME_LEN, MAX_TIMESTAMP, MessageError, cosigned_message, valid_subtree,
};

/// signed-note "Signature types": timestamped ML-DSA-44 (sub)tree cosignatures.
pub const ALG_MLDSA44: u8 = 0x06;
/// Length of an ML-DSA-44 public key (FIPS 204 `pkEncode`).
pub const PUBLIC_KEY_LEN: usize = 1312;
/// Length of an ML-DSA-44 signature.
pub const SIGNATURE_LEN: usize = 2420;
/// Length of the key-generation seed a private key holds.
pub const SEED_LEN: usize = 32;
/// The signature bytes of a line after the key ID: timestamp, then signature.
const TIMESTAMPED_LEN: usize = 8 + SIGNATURE_LEN;

/// The checkpoint a note text holds, as an ML-DSA-44 signature covers it: strictly
/// parsed, in canonical form (so the text is exactly what the message encodes), and
/// without extension lines (which the message does not cover).
fn signed_checkpoint(text: &str) -> Result<Checkpoint, NoteError> {
    let cp = Checkpoint::parse(text).map_err(|e| match e {
        CheckpointError::Malformed(m) => NoteError::Malformed(m),
        _ => NoteError::Malformed("not a checkpoint"),
    })?;
    if !cp.extensions.is_empty() {
        return Err(NoteError::Malformed(
            "ML-DSA-44 signatures do not cover checkpoint extension lines",
        ));
    }
    if cp.to_text() != text {
        return Err(NoteError::Malformed("checkpoint text is not canonical"));
    }
    Ok(cp)
}

/// A key name usable in ML-DSA-44 messages: a signed-note key name of at most
/// [`MAX_NAME_LEN`] bytes.
fn check_name(name: &str) -> Result<(), NoteError> {
    if !valid_name(name) {
        return Err(NoteError::BadKey("invalid key name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NoteError::BadKey(
            "ML-DSA-44 key names are at most 255 bytes (tlog-cosignature)",
        ));
    }
    Ok(())
}

/// `0x06 || public key`: what a verifier key carries and the key ID hashes.
fn typed_public_key(public_key: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(1 + public_key.len());
    b.push(ALG_MLDSA44);
    b.extend_from_slice(public_key);
    b
}

/// An ML-DSA-44 public key with its name and key ID: verifies a log's checkpoint
/// signatures, a witness's cosignatures and subtree cosignatures of type `0x06`.
pub struct MlDsa44Verifier {
    name: String,
    id: u32,
    public_key: Box<[u8]>,
    key: VerifyingKey<MlDsa44>,
}

impl MlDsa44Verifier {
    /// The verifier of `public_key` (1312 bytes, FIPS 204 `pkEncode`) named `name`; its
    /// key ID is derived from both.
    pub fn new(name: &str, public_key: &[u8]) -> Result<Self, NoteError> {
        check_name(name)?;
        let encoded = EncodedVerifyingKey::<MlDsa44>::try_from(public_key)
            .map_err(|_| NoteError::BadKey("an ML-DSA-44 public key is 1312 bytes"))?;
        Ok(MlDsa44Verifier {
            name: name.to_string(),
            id: key_id(name, &typed_public_key(public_key)),
            public_key: public_key.into(),
            key: VerifyingKey::decode(&encoded),
        })
    }

    /// Parse a verifier key `<name>+<hex key id>+base64(0x06 || public key)`; the key ID
    /// must be the one derived from the name and key (signed-note "Verifier keys").
    pub fn from_vkey(s: &str) -> Result<Self, NoteError> {
        let (name, id, raw) = split_key(s)?;
        if raw.first() != Some(&ALG_MLDSA44) {
            return Err(NoteError::BadKey(
                "not an ML-DSA-44 (type 0x06) verifier key",
            ));
        }
        if raw.len() != 1 + PUBLIC_KEY_LEN {
            return Err(NoteError::BadKey("an ML-DSA-44 public key is 1312 bytes"));
        }
        let v = Self::new(name, &raw[1..])?;
        if v.id != id {
            return Err(NoteError::BadKey("key id does not match the key"));
        }
        Ok(v)
    }

    /// The verifier key string.
    pub fn to_vkey(&self) -> String {
        format!(
            "{}+{:08x}+{}",
            self.name,
            self.id,
            B64.encode(typed_public_key(&self.public_key))
        )
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.id
    }

    /// The 1312-byte public key.
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// Whether `sig` is a line of this key (name and key ID match).
    pub fn matches(&self, sig: &NoteSignature) -> bool {
        sig.name == self.name && sig.key_id == self.id
    }

    /// Verify `signature` (the bytes after the key ID in a signature line: timestamp,
    /// then ML-DSA-44 signature) over the checkpoint note `text` (tlog-cosignature:
    /// start 0, end the tree size, hash the root; cosigner name = this key's name).
    /// Returns the timestamp in POSIX seconds, 0 when the signer made no statement
    /// about time. A text with extension lines never verifies.
    pub fn verify_checkpoint(&self, text: &str, signature: &[u8]) -> Result<u64, NoteError> {
        let cp = signed_checkpoint(text)?;
        self.verify_subtree(&cp.origin, 0, cp.size, &cp.root, signature)
    }

    /// Verify `signature` (timestamp, then ML-DSA-44 signature) over the subtree
    /// `[start, end)` with hash `hash` of the log `origin`; returns the timestamp.
    pub fn verify_subtree(
        &self,
        origin: &str,
        start: u64,
        end: u64,
        hash: &Hash,
        signature: &[u8],
    ) -> Result<u64, NoteError> {
        let bad = || NoteError::BadSignature(self.name.clone());
        if signature.len() != TIMESTAMPED_LEN {
            return Err(bad());
        }
        let (ts, sig) = signature.split_at(8);
        let mut t = [0u8; 8];
        t.copy_from_slice(ts);
        let timestamp = u64::from_be_bytes(t);
        let message =
            cosigned_message(&self.name, timestamp, origin, start, end, hash).map_err(|_| bad())?;
        let sig = Signature::<MlDsa44>::try_from(sig).map_err(|_| bad())?;
        if !self.key.verify_with_context(&message, &[], &sig) {
            return Err(bad());
        }
        Ok(timestamp)
    }
}

/// An ML-DSA-44 log key plugs into the signed-note core as a [`SignatureCheck`]: a
/// log's ML-DSA-44 signature is a type-0x06 cosignature of its checkpoint by its own
/// key (tlog-checkpoint "Signatures").
impl SignatureCheck for MlDsa44Verifier {
    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::CosignatureMlDsa44
    }

    fn public_key(&self) -> Vec<u8> {
        self.public_key.to_vec()
    }

    fn verify(&self, text: &[u8], signature: &[u8]) -> bool {
        std::str::from_utf8(text).is_ok_and(|text| self.verify_checkpoint(text, signature).is_ok())
    }
}

impl NoteVerifier {
    /// The verifier of an ML-DSA-44 log key (signature type `0x06`).
    pub fn from_mldsa44(key: Arc<MlDsa44Verifier>) -> Self {
        let (name, id) = (key.name().to_string(), key.key_id());
        NoteVerifier::with_check(name, id, key)
    }
}

impl PartialEq for MlDsa44Verifier {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.id == other.id && self.public_key == other.public_key
    }
}

impl Eq for MlDsa44Verifier {}

impl std::fmt::Debug for MlDsa44Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MlDsa44Verifier({}+{:08x})", self.name, self.id)
    }
}

/// An ML-DSA-44 private key: signs a log's checkpoints (as a [`LogSigner`]), and
/// cosigns checkpoints and subtrees as a witness would.
pub struct MlDsa44Signer {
    /// Zeroized on drop (ml-dsa's `zeroize` feature).
    key: Box<ExpandedSigningKey<MlDsa44>>,
    verifier: Arc<MlDsa44Verifier>,
}

impl MlDsa44Signer {
    /// The key generated from `seed` (FIPS 204 `ML-DSA.KeyGen_internal(ξ)`), named `name`.
    pub fn from_seed(name: &str, seed: &[u8; SEED_LEN]) -> Result<Self, NoteError> {
        check_name(name)?;
        let key = Box::new(ExpandedSigningKey::<MlDsa44>::from_seed(&(*seed).into()));
        let public_key = key.verifying_key().encode();
        let verifier = Arc::new(MlDsa44Verifier::new(name, public_key.as_slice())?);
        Ok(MlDsa44Signer { key, verifier })
    }

    /// Parse `PRIVATE+KEY+<name>+<hex key id>+base64(0x06 || 32-byte seed)`; the key ID
    /// must be the one of the key the seed generates.
    pub fn from_skey(s: &str) -> Result<Self, NoteError> {
        let (name, id, raw) = parse_skey(s)?;
        if raw.len() != 1 + SEED_LEN || raw[0] != ALG_MLDSA44 {
            return Err(NoteError::BadKey(
                "not an ML-DSA-44 (type 0x06) private key",
            ));
        }
        let mut seed = [0u8; SEED_LEN];
        seed.copy_from_slice(&raw[1..]);
        let signer = Self::from_seed(name, &seed)?;
        if signer.key_id() != id {
            return Err(NoteError::BadKey("key id does not match the key"));
        }
        Ok(signer)
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.verifier.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.verifier.id
    }

    /// The public half of this key.
    pub fn mldsa44_verifier(&self) -> Arc<MlDsa44Verifier> {
        self.verifier.clone()
    }

    /// The verifier key string.
    pub fn vkey(&self) -> String {
        self.verifier.to_vkey()
    }

    /// `timestamp || ML-DSA-44 signature of message`, hedged.
    fn sign_message(&self, timestamp: u64, message: &[u8]) -> Result<Vec<u8>, NoteError> {
        let sig = self
            .key
            .sign_randomized(message, &[], &mut ml_dsa::common::getrandom::SysRng)
            .map_err(|e| NoteError::Sign(format!("ML-DSA-44: {e}")))?;
        let mut out = Vec::with_capacity(TIMESTAMPED_LEN);
        out.extend_from_slice(&timestamp.to_be_bytes());
        out.extend_from_slice(sig.encode().as_slice());
        Ok(out)
    }

    fn line(&self, signature: Vec<u8>) -> NoteSignature {
        NoteSignature {
            name: self.verifier.name.clone(),
            key_id: self.verifier.id,
            signature,
        }
    }

    /// Cosign the checkpoint note `text` (which must have no extension lines) as of
    /// `timestamp` (POSIX seconds; tlog-witness: a witness's is never 0).
    pub fn cosign(&self, text: &str, timestamp: u64) -> Result<NoteSignature, NoteError> {
        let cp = signed_checkpoint(text)?;
        let message = cosigned_message(self.name(), timestamp, &cp.origin, 0, cp.size, &cp.root)?;
        Ok(self.line(self.sign_message(timestamp, &message)?))
    }

    /// Cosign the subtree `[start, end)` with hash `hash` of the log `origin`, with
    /// timestamp 0 (tlog-witness "sign-subtree": "the timestamp MUST be zero").
    pub fn sign_subtree(
        &self,
        origin: &str,
        start: u64,
        end: u64,
        hash: &Hash,
    ) -> Result<NoteSignature, NoteError> {
        let message = cosigned_message(self.name(), 0, origin, start, end, hash)?;
        Ok(self.line(self.sign_message(0, &message)?))
    }
}

impl LogSigner for MlDsa44Signer {
    fn name(&self) -> &str {
        MlDsa44Signer::name(self)
    }

    fn key_id(&self) -> u32 {
        MlDsa44Signer::key_id(self)
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::CosignatureMlDsa44
    }

    /// A timestamped ML-DSA-44 cosignature of the checkpoint, made by the log's own key
    /// (tlog-checkpoint "Signatures"). It carries the real signing time, `timestamp`
    /// milliseconds rounded down to seconds: the log states the tree was its largest
    /// at that time, as a witness does (0, "no statement", is what torchwood's test log
    /// uses only to get a reproducible vector).
    fn sign(&self, text: &str, timestamp: u64) -> Result<Vec<u8>, NoteError> {
        Ok(self.cosign(text, timestamp / 1000)?.signature)
    }

    fn verifier(&self) -> NoteVerifier {
        NoteVerifier::from_mldsa44(self.verifier.clone())
    }
}

impl std::fmt::Debug for MlDsa44Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MlDsa44Signer({}+{:08x})", self.name(), self.key_id())
    }
}

/// Generate a fresh ML-DSA-44 key named `name` (at most 255 bytes): `(private key,
/// verifier key)` strings.
pub fn generate_mldsa44_key(name: &str) -> Result<(String, String), NoteError> {
    check_name(name)?;
    let mut seed = [0u8; SEED_LEN];
    getrandom::fill(&mut seed).map_err(|e| NoteError::Random(e.to_string()))?;
    let signer = MlDsa44Signer::from_seed(name, &seed)?;
    let mut raw = Vec::with_capacity(1 + SEED_LEN);
    raw.push(ALG_MLDSA44);
    raw.extend_from_slice(&seed);
    let skey = format!(
        "PRIVATE+KEY+{name}+{:08x}+{}",
        signer.key_id(),
        B64.encode(&raw)
    );
    Ok((skey, signer.vkey()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;
    use crate::hash::{empty_root, leaf_hash};
    use crate::keys::log_signer_from_skey;
    use crate::note::{Note, open_note};
    use sha2::{Digest, Sha256};

    /// testdata/mldsa44/README.md: torchwood's ML-DSA-44 test log.
    const SEED: &str = "2886adc2b0eabfce67c0472939127998bf886cf256bfee8ba76a253fce1146e0";
    const SKEY: &str =
        "PRIVATE+KEY+example.com/mldsa-log+b5df45c5+BiiGrcKw6r/OZ8BHKTkSeZi/iGzyVr/ui6dqJT/OEUbg";
    const NAME: &str = "example.com/mldsa-log";
    const VKEY: &str = include_str!("../../../testdata/mldsa44/torchwood-log.vkey");
    const NOTE: &str = include_str!("../../../testdata/mldsa44/torchwood-log.checkpoint");

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn seed() -> [u8; 32] {
        unhex(SEED).try_into().unwrap()
    }

    fn b64_hash(s: &str) -> Hash {
        B64.decode(s).unwrap().try_into().unwrap()
    }

    #[test]
    fn torchwood_seed_gives_its_key_and_key_id() {
        let s = MlDsa44Signer::from_seed(NAME, &seed()).unwrap();
        assert_eq!(s.key_id(), 0xb5df45c5);
        assert_eq!(s.vkey(), VKEY.trim());
        assert_eq!(
            Sha256::digest(s.mldsa44_verifier().public_key()).to_vec(),
            unhex("a87b918c511f5e0e65e0caa54e73961ff42e48e9491098f5afac41b2501b4b20")
        );
        let from_skey = MlDsa44Signer::from_skey(SKEY).unwrap();
        assert_eq!(from_skey.vkey(), VKEY.trim());
        let v = MlDsa44Verifier::from_vkey(VKEY.trim()).unwrap();
        assert_eq!(v, *s.mldsa44_verifier());
        assert_eq!(v.to_vkey(), VKEY.trim());
        // Through the note seams: the type byte picks ML-DSA-44.
        let nv = NoteVerifier::from_vkey(VKEY.trim()).unwrap();
        assert_eq!(nv.algorithm(), SignatureAlgorithm::CosignatureMlDsa44);
        assert_eq!((nv.name(), nv.key_id()), (NAME, 0xb5df45c5));
        assert_eq!(nv.to_vkey(), VKEY.trim());
        let ls = log_signer_from_skey(SKEY).unwrap();
        assert_eq!(ls.algorithm(), SignatureAlgorithm::CosignatureMlDsa44);
        assert_eq!(ls.verifier(), nv);
    }

    #[test]
    fn torchwood_signed_note_verifies() {
        let nv = NoteVerifier::from_vkey(VKEY.trim()).unwrap();
        let (cp, note) = Checkpoint::open(NOTE.as_bytes(), NAME, &nv).unwrap();
        assert_eq!(cp.size, 1);
        assert_eq!(cp.root, leaf_hash(b"testonly"));
        let v = MlDsa44Verifier::from_vkey(VKEY.trim()).unwrap();
        assert!(v.matches(&note.signatures[0]));
        assert_eq!(
            v.verify_checkpoint(&note.text, &note.signatures[0].signature),
            Ok(0)
        );
        // It is the subtree [0, 1) signature torchwood made.
        assert_eq!(
            v.verify_subtree(NAME, 0, 1, &cp.root, &note.signatures[0].signature),
            Ok(0)
        );
        // The 112-byte message of testdata/mldsa44/README.md.
        assert_eq!(
            cosigned_message(NAME, 0, NAME, 0, 1, &cp.root).unwrap(),
            unhex(
                "737562747265652f76310a00156578616d706c652e636f6d2f6d6c6473612d6c6f670000000000000000
                 156578616d706c652e636f6d2f6d6c6473612d6c6f67000000000000000000000000000000
                 01fb3a04aedb19b463bab1f89257fbf8509488ca8c22b04f21be3c34ab9f9b0f7f"
            )
        );
    }

    #[test]
    fn tampered_torchwood_notes_fail() {
        let nv = NoteVerifier::from_vkey(VKEY.trim()).unwrap();
        let v = MlDsa44Verifier::from_vkey(VKEY.trim()).unwrap();
        let note = Note::parse(NOTE.as_bytes()).unwrap();
        let sig = &note.signatures[0].signature;
        // A flipped signature byte, a timestamp that is not the signed one.
        for i in [8, 100, sig.len() - 1, 7] {
            let mut bad = note.clone();
            bad.signatures[0].signature[i] ^= 1;
            assert!(
                open_note(&bad.to_bytes(), &[&nv]).is_err(),
                "byte {i} flipped"
            );
        }
        // Another size, another root, an extension line, a truncated signature.
        for text in [
            "example.com/mldsa-log\n2\n+zoErtsZtGO6sfiSV/v4UJSIyowisE8hvjw0q5+bD38=\n",
            "example.com/mldsa-log\n1\n/zoErtsZtGO6sfiSV/v4UJSIyowisE8hvjw0q5+bD38=\n",
            "example.com/mldsa-log\n1\n+zoErtsZtGO6sfiSV/v4UJSIyowisE8hvjw0q5+bD38=\next\n",
        ] {
            assert!(v.verify_checkpoint(text, sig).is_err(), "{text:?}");
        }
        assert!(
            v.verify_checkpoint(&note.text, &sig[..sig.len() - 1])
                .is_err()
        );
        // The same key under another name has another key ID, and its message names
        // another cosigner: the signature does not verify.
        let other = MlDsa44Verifier::new("example.com/other", v.public_key()).unwrap();
        assert_ne!(other.key_id(), v.key_id());
        assert!(other.verify_checkpoint(&note.text, sig).is_err());
        // A vkey whose key ID does not match.
        let wrong_id = VKEY.trim().replacen("+b5df45c5+", "+b5df45c4+", 1);
        assert!(NoteVerifier::from_vkey(&wrong_id).is_err());
        assert!(MlDsa44Verifier::from_vkey(&wrong_id).is_err());
        // A key of another length.
        let (name, id, mut raw) = split_key(VKEY.trim()).unwrap();
        raw.pop();
        let short = format!("{name}+{id:08x}+{}", B64.encode(&raw));
        assert!(NoteVerifier::from_vkey(&short).is_err());
        // A private key whose key ID does not match, or of another type.
        let bad_skey = SKEY.replacen("+b5df45c5+", "+00000000+", 1);
        assert!(MlDsa44Signer::from_skey(&bad_skey).is_err());
        assert!(log_signer_from_skey(&bad_skey).is_err());
        let (ed_skey, _) = crate::note::generate_key(NAME).unwrap();
        assert!(MlDsa44Signer::from_skey(&ed_skey).is_err());
        assert_eq!(
            log_signer_from_skey(&ed_skey).unwrap().algorithm(),
            SignatureAlgorithm::Ed25519
        );
        let (cosigner_skey, _) = crate::cosignature::generate_cosigner_key(NAME).unwrap();
        assert!(log_signer_from_skey(&cosigner_skey).is_err());
    }

    #[test]
    fn spec_example_messages_byte_for_byte() {
        // tlog-cosignature's example checkpoint, cosigned by witness.example.com/w1.
        let root = b64_hash("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=");
        let m = cosigned_message(
            "witness.example.com/w1",
            1679315147,
            "example.com/behind-the-sofa",
            0,
            20852163,
            &root,
        )
        .unwrap();
        assert_eq!(m.len(), 119);
        assert_eq!(
            m,
            unhex(
                "737562747265652f76310a00167769746e6573732e6578616d706c652e636f6d2f773100000000641850cb
                 1b6578616d706c652e636f6d2f626568696e642d7468652d736f6661000000000000000000000000013e2dc3
                 0ac5186a91863e8e1d90c808014aa89bf5da8e3ee1d9f07630f0378f68f1ab62"
            )
        );
        // tlog-witness "sign-subtree" example: subtree [8, 13), timestamp 0.
        let hash = b64_hash("mbsQCg+dEIMGlpqeGgk94JutQwKKS2Lo5IuDhKmDjiU=");
        let m = cosigned_message(
            "witness.example/w1",
            0,
            "example.com/behind-the-sofa",
            8,
            13,
            &hash,
        )
        .unwrap();
        assert_eq!(m.len(), 115);
        assert_eq!(
            m,
            unhex(
                "737562747265652f76310a00127769746e6573732e6578616d706c652f77310000000000000000
                 1b6578616d706c652e636f6d2f626568696e642d7468652d736f66610000000000000008000000000000000d
                 99bb100a0f9d108306969a9e1a093de09bad43028a4b62e8e48b8384a9838e25"
            )
        );
    }

    #[test]
    fn messages_that_cannot_be_encoded() {
        let h = [7u8; 32];
        let long = "x".repeat(256);
        assert_eq!(
            cosigned_message(&long, 1, "o", 0, 1, &h),
            Err(MessageError::NameLength(256))
        );
        assert_eq!(
            cosigned_message("", 1, "o", 0, 1, &h),
            Err(MessageError::NameLength(0))
        );
        assert_eq!(
            cosigned_message("n", 1, &long, 0, 1, &h),
            Err(MessageError::OriginLength(256))
        );
        assert_eq!(
            cosigned_message("n", 1 << 63, "o", 0, 1, &h),
            Err(MessageError::Timestamp(1 << 63))
        );
        assert!(cosigned_message("n", MAX_TIMESTAMP, "o", 0, 1, &h).is_ok());
        assert_eq!(
            cosigned_message("n", 5, "o", 8, 13, &h),
            Err(MessageError::TimestampedSubtree(8))
        );
        assert_eq!(
            cosigned_message("n", 0, "o", 3, 5, &h),
            Err(MessageError::InvalidSubtree { start: 3, end: 5 })
        );
        assert_eq!(
            cosigned_message("n", 1, "o", 0, 0, &h),
            Err(MessageError::EmptySubtreeHash)
        );
        assert!(cosigned_message("n", 1, "o", 0, 0, &empty_root()).is_ok());
        let ok = "x".repeat(255);
        assert_eq!(
            cosigned_message(&ok, 1, &ok, 0, 1, &h).unwrap().len(),
            70 + 255 + 255
        );
    }

    #[test]
    fn subtree_validity() {
        for (start, end) in [
            (0, 0),
            (0, 1),
            (0, 13),
            (8, 13),
            (8, 16),
            (4, 5),
            (5, 5),
            (16, 32),
            (1 << 62, (1 << 62) + 3),
            (0, u64::MAX),
            (u64::MAX - 1, u64::MAX),
        ] {
            assert!(valid_subtree(start, end), "[{start}, {end})");
        }
        for (start, end) in [
            (1, 0),
            (3, 5),
            (8, 17),
            (4, 12),
            (1, u64::MAX),
            (u64::MAX - 1, u64::MAX - 2),
        ] {
            assert!(!valid_subtree(start, end), "[{start}, {end})");
        }
        // Against the definition: start a multiple of the smallest power of two >= size.
        for start in 0..40u64 {
            for end in start + 1..80 {
                let ceil = (end - start).next_power_of_two();
                assert_eq!(
                    valid_subtree(start, end),
                    start % ceil == 0,
                    "[{start}, {end})"
                );
            }
        }
    }

    #[test]
    fn sign_and_verify_round_trip() {
        let signer = MlDsa44Signer::from_skey(SKEY).unwrap();
        let cp = Checkpoint {
            origin: NAME.into(),
            size: 12,
            root: [9; 32],
            extensions: vec![],
        };
        // The engine gives milliseconds; the line carries seconds.
        let signed = cp.sign_with(&[&signer], 1_700_000_123_999).unwrap();
        let nv = LogSigner::verifier(&signer);
        let (back, note) = Checkpoint::open(&signed, NAME, &nv).unwrap();
        assert_eq!(back, cp);
        let sig = &note.signatures[0];
        assert_eq!((sig.name.as_str(), sig.key_id), (NAME, 0xb5df45c5));
        assert_eq!(sig.signature.len(), 8 + SIGNATURE_LEN);
        let v = signer.mldsa44_verifier();
        assert_eq!(
            v.verify_checkpoint(&note.text, &sig.signature),
            Ok(1_700_000_123)
        );
        // As a checkpoint, a subtree [0, size) signature.
        assert_eq!(
            v.verify_subtree(NAME, 0, 12, &[9; 32], &sig.signature),
            Ok(1_700_000_123)
        );
        // Hedged: the same message signs differently each time, and both verify.
        let again = signer.cosign(&note.text, 1_700_000_123).unwrap();
        assert_ne!(again.signature, sig.signature);
        assert!(v.verify_checkpoint(&note.text, &again.signature).is_ok());
        // The empty tree signs as [0, 0) with the empty root; any other root does not.
        let empty = format!("{NAME}\n0\n{}\n", B64.encode(empty_root()));
        let s = signer.cosign(&empty, 1).unwrap();
        assert_eq!(v.verify_checkpoint(&empty, &s.signature), Ok(1));
        let bad_empty = format!("{NAME}\n0\n{}\n", B64.encode([1u8; 32]));
        assert!(signer.cosign(&bad_empty, 1).is_err());
        // Extension lines are not signed.
        let ext = format!("{}ext\n", cp.to_text());
        assert!(signer.cosign(&ext, 1).is_err());
        // Timestamps beyond 2^63 - 1 are not.
        assert!(signer.cosign(&cp.to_text(), 1 << 63).is_err());
        assert!(
            signer
                .sign(&cp.to_text(), u64::MAX)
                .is_ok_and(|s| v.verify_checkpoint(&cp.to_text(), &s).is_ok()),
            "u64::MAX ms is below 2^63 s"
        );
    }

    #[test]
    fn subtree_signatures() {
        let signer = MlDsa44Signer::from_seed("witness.example/w1", &[3; 32]).unwrap();
        let v = signer.mldsa44_verifier();
        let origin = "example.com/behind-the-sofa";
        let hash = [5u8; 32];
        let s = signer.sign_subtree(origin, 8, 13, &hash).unwrap();
        assert_eq!(&s.signature[..8], &[0; 8]);
        assert_eq!(v.verify_subtree(origin, 8, 13, &hash, &s.signature), Ok(0));
        assert!(
            v.verify_subtree(origin, 8, 12, &hash, &s.signature)
                .is_err()
        );
        assert!(
            v.verify_subtree("other.example", 8, 13, &hash, &s.signature)
                .is_err()
        );
        assert!(matches!(
            signer.sign_subtree(origin, 3, 5, &hash),
            Err(NoteError::Message(MessageError::InvalidSubtree { .. }))
        ));
        // A timestamp on a subtree that does not start at 0 is refused on verify too.
        let mut stamped = s.signature.clone();
        stamped[7] = 1;
        assert!(
            v.verify_subtree(origin, 8, 13, &hash, &stamped).is_err(),
            "nonzero timestamp with start 8"
        );
    }

    #[test]
    fn names_and_origins_up_to_255_bytes() {
        let n255 = "n".repeat(255);
        let n256 = "n".repeat(256);
        let signer = MlDsa44Signer::from_seed(&n255, &[1; 32]).unwrap();
        let cp = Checkpoint {
            origin: "o".repeat(255),
            size: 1,
            root: [2; 32],
            extensions: vec![],
        };
        let signed = cp.sign_with(&[&signer], 5_000).unwrap();
        let nv = LogSigner::verifier(&signer);
        assert!(Checkpoint::open(&signed, &cp.origin, &nv).is_ok());
        // 256 bytes: no key, no verifier, no signature.
        assert!(MlDsa44Signer::from_seed(&n256, &[1; 32]).is_err());
        assert!(MlDsa44Verifier::new(&n256, signer.mldsa44_verifier().public_key()).is_err());
        assert!(generate_mldsa44_key(&n256).is_err());
        let long = Checkpoint {
            origin: "o".repeat(256),
            ..cp
        };
        assert!(matches!(
            long.sign_with(&[&signer], 5_000),
            Err(NoteError::Message(MessageError::OriginLength(256)))
        ));
    }

    #[test]
    fn generated_keys_parse_back() {
        let (skey, vkey) = generate_mldsa44_key("example.com/new-log").unwrap();
        assert!(skey.starts_with("PRIVATE+KEY+example.com/new-log+"));
        let s = MlDsa44Signer::from_skey(&skey).unwrap();
        assert_eq!(s.vkey(), vkey);
        assert_eq!(
            NoteVerifier::from_vkey(&vkey).unwrap(),
            LogSigner::verifier(&s)
        );
        assert_eq!(format!("{s:?}"), format!("MlDsa44Signer({})", &vkey[..28]));
        assert!(generate_mldsa44_key("bad name").is_err());
    }
}
