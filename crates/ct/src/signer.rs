//! The checkpoint signature of a static-ct-api log: the RFC 6962 note signature
//! (static-ct-api "Checkpoints"), as a [`LogSigner`] the engine signs every checkpoint
//! with and a [`SignatureCheck`] its verifier checks them with.

use std::sync::Arc;

use sha2::Digest;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::note::{LogSigner, NoteError, NoteVerifier, SignatureAlgorithm, SignatureCheck};
use tlogd_static_ct::signer::{KeyError, LogKey};
use tlogd_static_ct::sth;

/// Signs a CT log's checkpoints with its ECDSA P-256 key: the note signature carries
/// the timestamp and an RFC 6962 `TreeHeadSignature` over the checkpoint's size and
/// root. Deterministic (RFC 6979).
#[derive(Clone, Debug)]
pub struct Rfc6962Signer {
    name: String,
    key: LogKey,
}

impl Rfc6962Signer {
    /// The signer of the log whose checkpoint origin is `origin` (static-ct-api: the
    /// submission prefix without its scheme), with `key`.
    pub fn new(origin: impl Into<String>, key: LogKey) -> Self {
        Rfc6962Signer {
            name: origin.into(),
            key,
        }
    }

    /// The log's key.
    pub fn key(&self) -> &LogKey {
        &self.key
    }
}

/// The checkpoint of a note text, which a static-ct-api checkpoint must be without
/// extension lines (static-ct-api "Checkpoints": the RFC 6962 signature covers only
/// the size and root, so a line it does not cover MUST NOT be there).
fn tree_head(text: &[u8]) -> Option<Checkpoint> {
    let text = std::str::from_utf8(text).ok()?;
    Checkpoint::parse(text)
        .ok()
        .filter(|cp| cp.extensions.is_empty())
}

impl LogSigner for Rfc6962Signer {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        u32::from_be_bytes(sth::note_key_id(&self.name, &self.key.log_id()))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::Rfc6962TreeHead
    }

    /// `timestamp` is the tree head's: the engine never gives one below the timestamp
    /// of an entry the tree holds, so no SCT promises an entry later than a tree head
    /// that includes it.
    fn sign(&self, text: &str, timestamp: u64) -> Result<Vec<u8>, NoteError> {
        let cp = tree_head(text.as_bytes()).ok_or(NoteError::Malformed(
            "a static-ct-api checkpoint has exactly an origin, a size and a root",
        ))?;
        let sig = sth::note_signature(&self.name, &self.key, timestamp, cp.size, &cp.root);
        // `note_signature` starts with the key ID, which the signature line writes.
        Ok(sig[4..].to_vec())
    }

    fn verifier(&self) -> NoteVerifier {
        NoteVerifier::with_check(
            self.name.clone(),
            self.key_id(),
            Arc::new(Rfc6962Check {
                name: self.name.clone(),
                spki: self.key.public_key_der().to_vec(),
                log_id: self.key.log_id(),
            }),
        )
    }
}

/// Checks RFC 6962 note signatures of one log key.
#[derive(Clone, Debug)]
pub struct Rfc6962Check {
    name: String,
    spki: Vec<u8>,
    log_id: [u8; 32],
}

impl Rfc6962Check {
    /// The verifier of the CT log whose checkpoint origin is `origin` and whose ECDSA
    /// P-256 public key is the DER `SubjectPublicKeyInfo` `spki` (a log list's `key`).
    pub fn verifier(origin: &str, spki: &[u8]) -> Result<NoteVerifier, KeyError> {
        tlogd_static_ct::signer::check_public_key(spki)?;
        let log_id: [u8; 32] = sha2::Sha256::digest(spki).into();
        let id = u32::from_be_bytes(sth::note_key_id(origin, &log_id));
        Ok(NoteVerifier::with_check(
            origin,
            id,
            Arc::new(Rfc6962Check {
                name: origin.to_string(),
                spki: spki.to_vec(),
                log_id,
            }),
        ))
    }
}

impl SignatureCheck for Rfc6962Check {
    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::Rfc6962TreeHead
    }

    /// The DER `SubjectPublicKeyInfo`.
    fn public_key(&self) -> Vec<u8> {
        self.spki.clone()
    }

    fn verify(&self, text: &[u8], signature: &[u8]) -> bool {
        let Some(cp) = tree_head(text) else {
            return false;
        };
        // The signature line's bytes lack the key ID `verify_note_signature` checks.
        let mut line = sth::note_key_id(&self.name, &self.log_id).to_vec();
        line.extend_from_slice(signature);
        sth::verify_note_signature(
            &self.name,
            &self.spki,
            &self.log_id,
            cp.size,
            &cp.root,
            &line,
        )
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};
    use tlogd_core::checkpoint::Checkpoint;

    use super::*;

    fn key() -> LogKey {
        LogKey::from_scalar(&Sha256::digest(b"skylight test log key")).unwrap()
    }

    /// The engine's signing path (`Checkpoint::sign_with`) gives Sunlight's
    /// deterministic checkpoint byte for byte, and its verifier opens it.
    #[test]
    fn checkpoints_sign_as_sunlight_and_verify() {
        let signer = Rfc6962Signer::new("rome2026h1.example.org", key());
        let cp = Checkpoint {
            origin: "rome2026h1.example.org".into(),
            size: 300,
            root: Sha256::digest(b"skylight test tree root").into(),
            extensions: vec![],
        };
        let signed = cp.sign_with(&[&signer], 1_767_139_200_000).unwrap();
        // At run time: the binary may come from a build in another clone.
        let manifest = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
        let want = std::fs::read(format!(
            "{manifest}/../static-ct/testdata/sunlight/checkpoint"
        ))
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&signed),
            String::from_utf8_lossy(&want)
        );
        let verifier = signer.verifier();
        let (back, _) = Checkpoint::open(&signed, "rome2026h1.example.org", &verifier).unwrap();
        assert_eq!(back, cp);
        // Another tree under the same signature does not verify.
        let mut forged = String::from_utf8(signed.clone()).unwrap();
        forged = forged.replacen("\n300\n", "\n301\n", 1);
        assert!(Checkpoint::open(forged.as_bytes(), "rome2026h1.example.org", &verifier).is_err());
        // Extension lines cannot be signed.
        let mut with_ext = cp.clone();
        with_ext.extensions.push("ext".into());
        assert!(with_ext.sign_with(&[&signer], 1).is_err());
        assert!(verifier.to_vkey().starts_with("rome2026h1.example.org+"));
    }

    #[test]
    fn keys_read_from_pem_and_write_back() {
        let k = key();
        let pem = k.to_pkcs8_pem().unwrap();
        let back = LogKey::from_pem(&pem).unwrap();
        assert_eq!(back.log_id(), k.log_id());
        assert!(
            k.public_key_pem()
                .unwrap()
                .starts_with("-----BEGIN PUBLIC KEY-----")
        );
        assert!(LogKey::from_pem("garbage").is_err());
    }
}
