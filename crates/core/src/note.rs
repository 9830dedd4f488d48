//! C2SP signed notes (signed-note.md): the note format, and the seam through which a
//! log signs and verifies its checkpoints with keys of any algorithm.
//!
//! A log signs with one or more [`LogSigner`]s, each in the order configured; every
//! verifier (the engine opening its own checkpoint, `tlogd verify`, the loadgen) goes
//! through [`NoteVerifier`]. This core implements Ed25519 (`0x01`, [`NoteSigner`]);
//! every other scheme plugs into it through [`SignatureCheck`] and [`LogSigner`]:
//! ML-DSA-44 (`0x06`) in [`crate::mldsa`], RFC 6962 tree head signatures (`0x05`) in
//! `tlogd-ct`. [`crate::keys`] holds the one table from a key string's type to its
//! scheme ([`NoteVerifier::from_vkey`], [`crate::keys::log_signer_from_skey`]), so
//! this module imports none. The types of signed-note "Signature types" are named in
//! [`SignatureAlgorithm`] so that adding one is a variant here, not a new path
//! (docs/seams.md, "Signers").

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// signed-note "Signature types": Ed25519.
const ALG_ED25519: u8 = 0x01;
/// Signature lines accepted per note (the spec requires at least 16).
const MAX_SIGNATURES: usize = 100;

/// A malformed key or note, or a failed verification.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoteError {
    /// A `PRIVATE+KEY+...` or verifier key string is malformed.
    #[error("malformed key: {0}")]
    BadKey(&'static str),
    /// Note syntax ("Format").
    #[error("malformed note: {0}")]
    Malformed(&'static str),
    /// A signature from a known key failed to verify.
    #[error("invalid signature by {0}")]
    BadSignature(String),
    /// No signature from a known key.
    #[error("note has no signature from a known key")]
    NoKnownSignature,
    /// Key generation failed.
    #[error("random number generator: {0}")]
    Random(String),
    /// Signing failed (an ML-DSA-44 signer could not get randomness).
    #[error("signing failed: {0}")]
    Sign(String),
    /// The ML-DSA-44 signed message cannot be encoded (a name or origin too long, a
    /// timestamp out of range, not a subtree).
    #[error("cannot sign: {0}")]
    Message(#[from] crate::subtree::MessageError),
}

/// A signature type of signed-note "Signature types": the byte after the key name in a
/// verifier key, hashed into the key ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SignatureAlgorithm {
    /// `0x01`: Ed25519 note signatures (signed-note "Ed25519").
    Ed25519,
    /// `0x04`: timestamped Ed25519 checkpoint cosignatures (tlog-cosignature).
    CosignatureEd25519,
    /// `0x05`: RFC 6962 `TreeHeadSignature`s (static-ct-api), ECDSA P-256.
    Rfc6962TreeHead,
    /// `0x06`: timestamped ML-DSA-44 (sub)tree cosignatures (tlog-cosignature).
    CosignatureMlDsa44,
}

impl SignatureAlgorithm {
    /// The signature type byte.
    pub fn byte(self) -> u8 {
        match self {
            SignatureAlgorithm::Ed25519 => 0x01,
            SignatureAlgorithm::CosignatureEd25519 => 0x04,
            SignatureAlgorithm::Rfc6962TreeHead => 0x05,
            SignatureAlgorithm::CosignatureMlDsa44 => 0x06,
        }
    }

    /// The algorithm of a signature type byte, if it is one of these.
    pub fn from_byte(b: u8) -> Option<Self> {
        [
            SignatureAlgorithm::Ed25519,
            SignatureAlgorithm::CosignatureEd25519,
            SignatureAlgorithm::Rfc6962TreeHead,
            SignatureAlgorithm::CosignatureMlDsa44,
        ]
        .into_iter()
        .find(|a| a.byte() == b)
    }
}

/// One key that signs a log's checkpoints. A log may hold several (a checkpoint then
/// carries one signature line from each, in the order configured), of any algorithm:
/// Ed25519 ([`NoteSigner`]), ML-DSA-44 ([`MlDsa44Signer`]), ECDSA P-256 for CT
/// (`tlogd-ct`).
pub trait LogSigner: Send + Sync + std::fmt::Debug {
    /// The key name (signed-note: the log's origin for a log key).
    fn name(&self) -> &str;

    /// The key ID (signed-note "Signatures").
    fn key_id(&self) -> u32;

    /// The key's signature type.
    fn algorithm(&self) -> SignatureAlgorithm;

    /// The signature of the note `text` (ending in a newline), as it follows the key ID
    /// in the signature line. `timestamp` (milliseconds since the Unix epoch) is when
    /// the note is signed, for algorithms whose signatures carry one (cosignatures, CT's
    /// tree head signature); the engine never gives one below an entry's timestamp.
    fn sign(&self, text: &str, timestamp: u64) -> Result<Vec<u8>, NoteError>;

    /// The verifier of this key's signatures.
    fn verifier(&self) -> NoteVerifier;
}

/// Key ID (signed-note "Signatures"): first 4 bytes, big-endian, of
/// `SHA-256(name || "\n" || signature type || public key)`.
pub fn key_id(name: &str, alg_and_key: &[u8]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update(alg_and_key);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

fn ed25519_key_id(name: &str, key: &VerifyingKey) -> u32 {
    typed_key_id(name, ALG_ED25519, key)
}

/// The key ID of an Ed25519 key of signature type `alg` (signed-note: the first four
/// bytes of SHA-256(name || 0x0A || alg || key)).
pub(crate) fn typed_key_id(name: &str, alg: u8, key: &VerifyingKey) -> u32 {
    key_id(name, &typed_key(alg, key))
}

fn typed_key(alg: u8, key: &VerifyingKey) -> [u8; 33] {
    let mut b = [0u8; 33];
    b[0] = alg;
    b[1..].copy_from_slice(key.as_bytes());
    b
}

/// Parse a verifier key string of an Ed25519 key of signature type `alg`: its name,
/// key ID (checked against the key) and public key. `what` names the expected type in
/// the error.
pub(crate) fn parse_typed_vkey<'a>(
    s: &'a str,
    alg: u8,
    what: &'static str,
) -> Result<(&'a str, u32, VerifyingKey), NoteError> {
    let (name, id, key) = split_key(s)?;
    if key.len() != 33 || key[0] != alg {
        return Err(NoteError::BadKey(what));
    }
    let mut pk = [0u8; 32];
    pk.copy_from_slice(&key[1..]);
    let key = VerifyingKey::from_bytes(&pk)
        .map_err(|_| NoteError::BadKey("invalid Ed25519 public key"))?;
    if typed_key_id(name, alg, &key) != id {
        return Err(NoteError::BadKey("key id does not match the key"));
    }
    Ok((name, id, key))
}

/// The verifier key string `name+hex8+base64(alg || key)`.
pub(crate) fn typed_vkey(name: &str, id: u32, alg: u8, key: &VerifyingKey) -> String {
    format!("{name}+{id:08x}+{}", B64.encode(typed_key(alg, key)))
}

/// Parse `name+hex8+base64` (shared by private and verifier keys).
pub(crate) fn split_key(s: &str) -> Result<(&str, u32, Vec<u8>), NoteError> {
    let mut parts = s.splitn(3, '+');
    let name = parts.next().ok_or(NoteError::BadKey("missing name"))?;
    let hash = parts.next().ok_or(NoteError::BadKey("missing key id"))?;
    let key = parts.next().ok_or(NoteError::BadKey("missing key"))?;
    if !valid_name(name) {
        return Err(NoteError::BadKey("invalid key name"));
    }
    if hash.len() != 8
        || !hash
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(NoteError::BadKey("key id is not 8 lowercase hex digits"));
    }
    let id = u32::from_str_radix(hash, 16).map_err(|_| NoteError::BadKey("bad key id"))?;
    let key = B64
        .decode(key)
        .map_err(|_| NoteError::BadKey("key is not base64"))?;
    Ok((name, id, key))
}

/// Parse `PRIVATE+KEY+<name>+<hex key id>+<base64(key)>`: the name, the key ID (not
/// checked against the key here) and the decoded key bytes (type byte first).
pub(crate) fn parse_skey(s: &str) -> Result<(&str, u32, Vec<u8>), NoteError> {
    let rest = s
        .strip_prefix("PRIVATE+KEY+")
        .ok_or(NoteError::BadKey("missing PRIVATE+KEY+ prefix"))?;
    split_key(rest)
}

/// Parse `PRIVATE+KEY+<name>+<hex key id>+<base64(alg || 32-byte Ed25519 seed)>`, a
/// note signer's (`alg` 0x01) or a cosigner's (0x04) private key: its name, key ID
/// (checked against the key with `key_id`) and key. `wrong_type` is the message for
/// another algorithm byte.
pub(crate) fn parse_ed25519_skey(
    s: &str,
    alg: u8,
    wrong_type: &'static str,
    key_id: fn(&str, &ed25519_dalek::VerifyingKey) -> u32,
) -> Result<(String, u32, SigningKey), NoteError> {
    let (name, id, key) = parse_skey(s)?;
    if key.len() != 33 || key[0] != alg {
        return Err(NoteError::BadKey(wrong_type));
    }
    let mut seed = [0u8; 32];
    seed.copy_from_slice(&key[1..]);
    let key = SigningKey::from_bytes(&seed);
    if key_id(name, &key.verifying_key()) != id {
        return Err(NoteError::BadKey("key id does not match the key"));
    }
    Ok((name.to_string(), id, key))
}

/// An Ed25519 note signer.
pub struct NoteSigner {
    name: String,
    id: u32,
    key: SigningKey,
}

impl NoteSigner {
    /// Parse `PRIVATE+KEY+<name>+<hex key id>+<base64(0x01 || 32-byte seed)>`.
    pub fn from_skey(s: &str) -> Result<Self, NoteError> {
        let (name, id, key) =
            parse_ed25519_skey(s, ALG_ED25519, "not an Ed25519 private key", ed25519_key_id)?;
        Ok(NoteSigner { name, id, key })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.id
    }

    /// The matching verifier.
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            id: self.id,
            key: VerifierKey::Ed25519(self.key.verifying_key()),
        }
    }

    /// Ed25519 signature over `text` (deterministic, RFC 8032).
    pub fn sign_raw(&self, text: &[u8]) -> [u8; 64] {
        self.key.sign(text).to_bytes()
    }
}

impl LogSigner for NoteSigner {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::Ed25519
    }

    /// Ed25519 note signatures carry no time: `timestamp` is not used.
    fn sign(&self, text: &str, _timestamp: u64) -> Result<Vec<u8>, NoteError> {
        Ok(self.sign_raw(text.as_bytes()).to_vec())
    }

    fn verifier(&self) -> NoteVerifier {
        NoteSigner::verifier(self)
    }
}

impl std::fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NoteSigner({}+{:08x})", self.name, self.id)
    }
}

/// A note verifier: one key of a log, of any supported [`SignatureAlgorithm`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    id: u32,
    key: VerifierKey,
}

/// The public key of a [`NoteVerifier`], by algorithm: one variant per signature type
/// a log can sign its checkpoints with.
#[derive(Clone, Debug)]
enum VerifierKey {
    Ed25519(VerifyingKey),
    /// Any other signature type, plugged in ([`SignatureCheck`]): ML-DSA-44
    /// ([`crate::mldsa`]), CT's RFC 6962 note signature (`tlogd-ct`).
    Other(Arc<dyn SignatureCheck>),
}

impl PartialEq for VerifierKey {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (VerifierKey::Ed25519(a), VerifierKey::Ed25519(b)) => a == b,
            (VerifierKey::Other(a), VerifierKey::Other(b)) => {
                a.algorithm() == b.algorithm() && a.public_key() == b.public_key()
            }
            _ => false,
        }
    }
}

impl Eq for VerifierKey {}

/// The checking half of a signature type the signed-note core does not implement
/// itself: a log key whose signatures are checked by its scheme (ML-DSA-44 in
/// [`crate::mldsa`], the RFC 6962 note signature of a static-ct-api log in
/// `tlogd-ct`), wrapped in a [`NoteVerifier`] with [`NoteVerifier::with_check`] so
/// notes verify as with any other key.
pub trait SignatureCheck: Send + Sync + std::fmt::Debug {
    /// The signature type.
    fn algorithm(&self) -> SignatureAlgorithm;

    /// The public key as a verifier key string carries it after the type byte.
    fn public_key(&self) -> Vec<u8>;

    /// Whether `signature` (the bytes after the key ID in a signature line) is this
    /// key's signature of the note `text`.
    fn verify(&self, text: &[u8], signature: &[u8]) -> bool;
}

impl NoteVerifier {
    /// An Ed25519 verifier key (`0x01`); [`NoteVerifier::from_vkey`] takes every type a
    /// log signs with.
    pub fn from_ed25519_vkey(s: &str) -> Result<Self, NoteError> {
        let (name, id, key) = parse_typed_vkey(s, ALG_ED25519, "not an Ed25519 verifier key")?;
        Ok(NoteVerifier {
            name: name.to_string(),
            id,
            key: VerifierKey::Ed25519(key),
        })
    }

    /// A verifier of `name`'s key `id` whose signatures `check` checks.
    pub fn with_check(name: impl Into<String>, id: u32, check: Arc<dyn SignatureCheck>) -> Self {
        NoteVerifier {
            name: name.into(),
            id,
            key: VerifierKey::Other(check),
        }
    }

    /// The verifier key string: `<name>+<hex key id>+<base64(type || public key)>`.
    pub fn to_vkey(&self) -> String {
        match &self.key {
            VerifierKey::Ed25519(key) => typed_vkey(&self.name, self.id, ALG_ED25519, key),
            VerifierKey::Other(check) => {
                let mut raw = vec![check.algorithm().byte()];
                raw.extend_from_slice(&check.public_key());
                format!("{}+{:08x}+{}", self.name, self.id, B64.encode(raw))
            }
        }
    }

    /// The key's signature type.
    pub fn algorithm(&self) -> SignatureAlgorithm {
        match &self.key {
            VerifierKey::Ed25519(_) => SignatureAlgorithm::Ed25519,
            VerifierKey::Other(check) => check.algorithm(),
        }
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.id
    }

    fn verify(&self, text: &[u8], sig: &[u8]) -> bool {
        match &self.key {
            VerifierKey::Ed25519(key) => {
                let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
                    return false;
                };
                key.verify_strict(text, &sig).is_ok()
            }
            VerifierKey::Other(check) => check.verify(text, sig),
        }
    }
}

/// Generate a fresh Ed25519 key named `name`: `(private key, verifier key)` strings.
pub fn generate_key(name: &str) -> Result<(String, String), NoteError> {
    if !valid_name(name) {
        return Err(NoteError::BadKey("invalid key name"));
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| NoteError::Random(e.to_string()))?;
    let key = SigningKey::from_bytes(&seed);
    let id = ed25519_key_id(name, &key.verifying_key());
    let mut b = Vec::with_capacity(33);
    b.push(ALG_ED25519);
    b.extend_from_slice(&seed);
    let skey = format!("PRIVATE+KEY+{name}+{id:08x}+{}", B64.encode(&b));
    let vkey = NoteSigner::from_skey(&skey)?.verifier().to_vkey();
    Ok((skey, vkey))
}

/// One signature line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key ID.
    pub key_id: u32,
    /// The signature bytes after the key ID.
    pub signature: Vec<u8>,
}

/// A parsed note: text and signatures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The note text, including its final newline.
    pub text: String,
    /// Signatures in the order they appear.
    pub signatures: Vec<NoteSignature>,
}

impl Note {
    /// Parse a signed note (signed-note "Format"); no signature is verified.
    pub fn parse(bytes: &[u8]) -> Result<Note, NoteError> {
        let s = std::str::from_utf8(bytes).map_err(|_| NoteError::Malformed("not UTF-8"))?;
        if s.chars().any(|c| c < ' ' && c != '\n') {
            return Err(NoteError::Malformed("control character"));
        }
        // The text is separated from the signatures by the last empty line.
        let split = s
            .rfind("\n\n")
            .ok_or(NoteError::Malformed("no blank line before signatures"))?;
        let text = &s[..split + 1];
        let sigs = &s[split + 2..];
        if sigs.is_empty() || !sigs.ends_with('\n') {
            return Err(NoteError::Malformed("signatures must end with a newline"));
        }
        let mut signatures = Vec::new();
        for line in sigs[..sigs.len() - 1].split('\n') {
            if signatures.len() == MAX_SIGNATURES {
                return Err(NoteError::Malformed("too many signatures"));
            }
            let rest = line
                .strip_prefix("\u{2014} ")
                .ok_or(NoteError::Malformed("signature line without em dash"))?;
            let (name, b64) = rest
                .split_once(' ')
                .ok_or(NoteError::Malformed("signature line without key name"))?;
            if !valid_name(name) {
                return Err(NoteError::Malformed("invalid key name"));
            }
            let raw = B64
                .decode(b64)
                .map_err(|_| NoteError::Malformed("signature is not base64"))?;
            if raw.len() < 5 {
                return Err(NoteError::Malformed("signature too short"));
            }
            signatures.push(NoteSignature {
                name: name.to_string(),
                key_id: u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]),
                signature: raw[4..].to_vec(),
            });
        }
        Ok(Note {
            text: text.to_string(),
            signatures,
        })
    }

    /// Encode: text, blank line, signature lines.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = String::with_capacity(self.text.len() + 1 + 100 * self.signatures.len());
        out.push_str(&self.text);
        out.push('\n');
        for sig in &self.signatures {
            let mut raw = Vec::with_capacity(4 + sig.signature.len());
            raw.extend_from_slice(&sig.key_id.to_be_bytes());
            raw.extend_from_slice(&sig.signature);
            out.push_str("\u{2014} ");
            out.push_str(&sig.name);
            out.push(' ');
            out.push_str(&B64.encode(raw));
            out.push('\n');
        }
        out.into_bytes()
    }
}

/// Sign `text` (which must end in a newline) with every Ed25519 signer.
pub fn sign_note(text: &str, signers: &[&NoteSigner]) -> Result<Vec<u8>, NoteError> {
    let signers: Vec<&dyn LogSigner> = signers.iter().map(|s| *s as &dyn LogSigner).collect();
    sign_note_at(text, &signers, 0)
}

/// Sign `text` (which must end in a newline) with every signer, in order, at
/// `timestamp` (milliseconds since the Unix epoch; see [`LogSigner::sign`]).
pub fn sign_note_at(
    text: &str,
    signers: &[&dyn LogSigner],
    timestamp: u64,
) -> Result<Vec<u8>, NoteError> {
    if !text.ends_with('\n') {
        return Err(NoteError::Malformed("text must end with a newline"));
    }
    if text.chars().any(|c| c < ' ' && c != '\n') {
        return Err(NoteError::Malformed("control character"));
    }
    let note = Note {
        text: text.to_string(),
        signatures: signers
            .iter()
            .map(|s| {
                Ok(NoteSignature {
                    name: s.name().to_string(),
                    key_id: s.key_id(),
                    signature: s.sign(text, timestamp)?,
                })
            })
            .collect::<Result<_, NoteError>>()?,
    };
    Ok(note.to_bytes())
}

/// Parse and verify (signed-note "Signatures"): signatures from unknown keys are
/// ignored; one from a known key (name and ID match) must verify; at least one must.
pub fn open_note(bytes: &[u8], verifiers: &[&NoteVerifier]) -> Result<Note, NoteError> {
    let note = Note::parse(bytes)?;
    let mut verified = 0;
    for sig in &note.signatures {
        let Some(v) = verifiers
            .iter()
            .find(|v| v.name == sig.name && v.id == sig.key_id)
        else {
            continue;
        };
        if !v.verify(note.text.as_bytes(), &sig.signature) {
            return Err(NoteError::BadSignature(sig.name.clone()));
        }
        verified += 1;
    }
    if verified == 0 {
        return Err(NoteError::NoKnownSignature);
    }
    Ok(note)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKEY: &str = "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
    const VKEY: &str =
        "example.com/log/testdata+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx";

    #[test]
    fn test_key_matches_its_verifier() {
        let s = NoteSigner::from_skey(SKEY).unwrap();
        assert_eq!(s.verifier().to_vkey(), VKEY);
        assert_eq!(NoteVerifier::from_vkey(VKEY).unwrap(), s.verifier());
        assert_eq!(s.key_id(), 0x33d7b496);
    }

    #[test]
    fn sign_open_and_unknown_signatures() {
        let s = NoteSigner::from_skey(SKEY).unwrap();
        let (other_sk, other_vk) = generate_key("other.example/key").unwrap();
        let other = NoteSigner::from_skey(&other_sk).unwrap();
        let v = s.verifier();
        let ov = NoteVerifier::from_vkey(&other_vk).unwrap();
        let note = sign_note("hello\nworld\n", &[&other, &s]).unwrap();
        let n = open_note(&note, &[&v]).unwrap();
        assert_eq!(n.text, "hello\nworld\n");
        assert_eq!(n.signatures.len(), 2);
        assert_eq!(Note::parse(&note).unwrap().to_bytes(), note);
        assert_eq!(open_note(&note, &[&ov, &v]).unwrap().text, "hello\nworld\n");
        let only_other = sign_note("hello\n", &[&other]).unwrap();
        assert_eq!(
            open_note(&only_other, &[&v]),
            Err(NoteError::NoKnownSignature)
        );
        let mut bad = note.clone();
        bad[0] = b'j';
        assert!(matches!(
            open_note(&bad, &[&v]),
            Err(NoteError::BadSignature(_))
        ));
    }

    #[test]
    fn malformed_notes_and_keys() {
        let v = NoteSigner::from_skey(SKEY).unwrap().verifier();
        for bad in [
            &b"no blank line\n"[..],
            b"text\n\n",
            b"text\n\nnot a sig\n",
            b"text\n\n\xe2\x80\x94 name sig",
            b"t\x01\n\n\xe2\x80\x94 a AAAAAAA=\n",
        ] {
            assert!(
                open_note(bad, &[&v]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            NoteSigner::from_skey(
                "PRIVATE+KEY+a+00000000+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg"
            )
            .is_err()
        );
        assert!(
            NoteVerifier::from_vkey(
                "example.com/log/testdata+33d7b497+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx"
            )
            .is_err()
        );
        assert!(
            NoteVerifier::from_vkey(
                "bad name+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx"
            )
            .is_err()
        );
        assert!(sign_note("no newline", &[]).is_err());
    }
}
