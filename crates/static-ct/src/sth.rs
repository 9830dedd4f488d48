//! Signed tree heads: RFC 6962 §3.5's `TreeHeadSignature` and the RFC 6962 note
//! signature a static-ct-api checkpoint carries (static-ct-api "Checkpoints").

use sha2::{Digest, Sha256};

use crate::signer::LogKey;
use crate::{FormatError, format_error};

/// signed-note signature type of the RFC 6962 note signature.
pub const NOTE_SIGNATURE_TYPE: u8 = 0x05;

/// RFC 6962 §3.5: what a tree head signature covers: version v1 (0), signature type
/// `tree_hash` (1), the timestamp (ms), the tree size and its root hash.
pub fn signature_input(timestamp: u64, size: u64, root: &[u8; 32]) -> [u8; 50] {
    let mut out = [0u8; 50];
    out[1] = 1;
    out[2..10].copy_from_slice(&timestamp.to_be_bytes());
    out[10..18].copy_from_slice(&size.to_be_bytes());
    out[18..].copy_from_slice(root);
    out
}

/// The note key ID of the log `name` with `log_id`: the first four bytes of
/// SHA-256(name || 0x0A || 0x05 || log_id).
pub fn note_key_id(name: &str, log_id: &[u8; 32]) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', NOTE_SIGNATURE_TYPE]);
    h.update(log_id);
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

/// The decoded bytes of a checkpoint's RFC 6962 note signature line: the key ID, then
/// `RFC6962NoteSignature` (the timestamp, then the `TreeHeadSignature` as a
/// `DigitallySigned`).
pub fn note_signature(
    name: &str,
    key: &LogKey,
    timestamp: u64,
    size: u64,
    root: &[u8; 32],
) -> Vec<u8> {
    let signed = key.sign(&signature_input(timestamp, size, root));
    let mut out = Vec::with_capacity(12 + signed.len());
    out.extend_from_slice(&note_key_id(name, &key.log_id()));
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.extend_from_slice(&signed);
    out
}

/// Check an RFC 6962 note signature of the log `name` (key `spki`, ID `log_id`) on the
/// tree head (`size`, `root`); its timestamp.
pub fn verify_note_signature(
    name: &str,
    spki: &[u8],
    log_id: &[u8; 32],
    size: u64,
    root: &[u8; 32],
    signature: &[u8],
) -> Result<u64, FormatError> {
    if signature.len() < 12 || signature[..4] != note_key_id(name, log_id) {
        return Err(format_error("note signature", "not this log's key ID"));
    }
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&signature[4..12]);
    let timestamp = u64::from_be_bytes(ts);
    let rest = crate::signer::verify(
        spki,
        &signature_input(timestamp, size, root),
        &signature[12..],
    )?;
    if !rest.is_empty() {
        return Err(format_error("note signature", "bytes after the signature"));
    }
    Ok(timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;

    fn testdata(path: &str) -> String {
        // At run time: the binary may come from a build in another clone.
        let manifest = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
        let p = format!("{manifest}/testdata/{path}");
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// TesseraCT's known answer.
    #[test]
    fn the_tree_head_signature_input_matches_its_known_answer() {
        assert_eq!(
            signature_input(2345, 6, b"imustbeexactlythirtytwobyteslong")[..],
            hex(
                "00 01 0000000000000929 0000000000000006 696d757374626565786163746c7974686972747974776f62797465736c6f6e67"
            )
        );
    }

    /// Sunlight's skylight test checkpoint, signed again here: the same signature
    /// line, byte for byte (RFC 6979), and the key's `LogID` and `key` as its
    /// log.v3.json publishes them.
    #[test]
    fn sunlight_checkpoint_signature_is_reproduced_byte_for_byte() {
        // d = SHA-256("skylight test log key"), below the group order n (as the
        // vector's README says it is used, reduced mod n: a no-op for this value).
        let d = Sha256::digest(b"skylight test log key");
        let key = LogKey::from_scalar(&d).expect("a valid scalar");
        let list = testdata("sunlight/log.v3.json");
        let field = |name: &str| {
            let at = list.find(&format!("\"{name}\": \"")).expect(name) + name.len() + 5;
            list[at..at + list[at..].find('"').unwrap()].to_string()
        };
        assert_eq!(B64.encode(key.log_id()), field("log_id"));
        assert_eq!(B64.encode(key.public_key_der()), field("key"));

        let checkpoint = testdata("sunlight/checkpoint");
        let (body, sigs) = checkpoint.split_once("\n\n").unwrap();
        let mut lines = body.lines();
        let origin = lines.next().unwrap();
        let size: u64 = lines.next().unwrap().parse().unwrap();
        let root: [u8; 32] = B64
            .decode(lines.next().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(
            root,
            <[u8; 32]>::from(Sha256::digest(b"skylight test tree root"))
        );
        let line = sigs.lines().next().unwrap();
        let want = line
            .strip_prefix(&format!("\u{2014} {origin} "))
            .expect("a signature line of the origin");
        let ours = note_signature(origin, &key, 1767139200000, size, &root);
        assert_eq!(B64.encode(&ours), want);
        let ts = verify_note_signature(
            origin,
            key.public_key_der(),
            &key.log_id(),
            size,
            &root,
            &ours,
        );
        assert_eq!(ts, Ok(1767139200000));
        // Another tree, another name: refused.
        assert!(
            verify_note_signature(
                origin,
                key.public_key_der(),
                &key.log_id(),
                size + 1,
                &root,
                &ours
            )
            .is_err()
        );
        assert!(
            verify_note_signature(
                "other.example",
                key.public_key_der(),
                &key.log_id(),
                size,
                &root,
                &ours
            )
            .is_err()
        );
    }
}
