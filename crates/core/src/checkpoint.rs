//! Checkpoints (tlog-checkpoint.md "Note text"): origin, size, root, extension lines.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::hash::Hash;
use crate::note::{
    LogSigner, Note, NoteError, NoteSigner, NoteVerifier, open_note, sign_note, sign_note_at,
};

/// A checkpoint body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin line.
    pub origin: String,
    /// Tree size.
    pub size: u64,
    /// Root hash at `size`.
    pub root: Hash,
    /// Extension lines, without newlines, preserved verbatim.
    pub extensions: Vec<String>,
}

/// A malformed or unverifiable checkpoint.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// Body syntax.
    #[error("malformed checkpoint: {0}")]
    Malformed(&'static str),
    /// The origin line is not the expected one.
    #[error("checkpoint origin {found:?} is not {expected:?}")]
    WrongOrigin {
        /// Expected origin.
        expected: String,
        /// Origin found.
        found: String,
    },
    /// The signed note did not open.
    #[error(transparent)]
    Note(#[from] NoteError),
}

/// Longest origin tlogd accepts, in bytes. Every backend must be able to record it:
/// the MySQL schema keeps it in `tlogd_meta.origin VARBINARY(1024)` (PostgreSQL's
/// `bytea` and the POSIX state slot's 16-bit length hold more), so a longer origin
/// would be refused, or truncated and then mismatched, by the database.
pub const MAX_ORIGIN_LEN: usize = 1024;

/// Why an origin cannot name a log (see [`validate_origin`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OriginError {
    /// tlog-checkpoint "Note text": the origin MUST be non-empty.
    #[error("is empty")]
    Empty,
    /// Longer than [`MAX_ORIGIN_LEN`] bytes.
    #[error("is {0} bytes long; at most {MAX_ORIGIN_LEN} are allowed")]
    TooLong(usize),
    /// A control character: a newline would end the origin line, and signed-note
    /// "Format" forbids the other ASCII controls in a note.
    #[error("contains the control character {ch:?} at byte {at}")]
    Control {
        /// The character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
    /// Leading or trailing whitespace.
    #[error("begins or ends with whitespace")]
    EdgeWhitespace,
}

/// Check that `origin` can be a checkpoint's first line, signed and recorded by every
/// backend:
///
/// * non-empty (tlog-checkpoint "Note text": "The origin MUST be non-empty");
/// * no control character: signed-note "Format" forbids ASCII controls other than
///   newline in a note, and a newline would split the origin line. tlogd is stricter
///   than the note format here and also refuses DEL and the C1 controls (Unicode
///   `Cc`), which no printable log name holds;
/// * no leading or trailing whitespace: invisible in a configuration file, and clients
///   compare the origin byte for byte, so it would name another log than intended
///   (tlog-checkpoint recommends no spaces at all; spaces and `+` inside are left to
///   the operator, since the spec only says SHOULD, but they keep the origin from
///   being the key name, which the daemon warns about);
/// * at most [`MAX_ORIGIN_LEN`] bytes.
pub fn validate_origin(origin: &str) -> Result<(), OriginError> {
    if origin.is_empty() {
        return Err(OriginError::Empty);
    }
    if origin.len() > MAX_ORIGIN_LEN {
        return Err(OriginError::TooLong(origin.len()));
    }
    if let Some((at, ch)) = origin.char_indices().find(|(_, c)| c.is_control()) {
        return Err(OriginError::Control { ch, at });
    }
    if origin.starts_with(char::is_whitespace) || origin.ends_with(char::is_whitespace) {
        return Err(OriginError::EdgeWhitespace);
    }
    Ok(())
}

impl Checkpoint {
    /// The note text: `origin\nsize\nbase64(root)\n` then one line per extension.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        );
        for e in &self.extensions {
            s.push_str(e);
            s.push('\n');
        }
        s
    }

    /// Parse a note text strictly.
    pub fn parse(text: &str) -> Result<Checkpoint, CheckpointError> {
        let body = text
            .strip_suffix('\n')
            .ok_or(CheckpointError::Malformed("text must end with a newline"))?;
        let mut lines = body.split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or(CheckpointError::Malformed("empty origin"))?;
        let size_s = lines
            .next()
            .ok_or(CheckpointError::Malformed("missing size"))?;
        let canonical = !size_s.is_empty()
            && size_s.bytes().all(|b| b.is_ascii_digit())
            && (size_s == "0" || !size_s.starts_with('0'));
        if !canonical {
            return Err(CheckpointError::Malformed("size is not canonical decimal"));
        }
        let size = size_s
            .parse()
            .map_err(|_| CheckpointError::Malformed("size out of range"))?;
        let root_s = lines
            .next()
            .ok_or(CheckpointError::Malformed("missing root hash"))?;
        let root: Hash = B64
            .decode(root_s)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or(CheckpointError::Malformed(
                "root hash is not base64 of 32 bytes",
            ))?;
        let extensions: Vec<String> = lines.map(str::to_string).collect();
        if extensions.iter().any(|e| e.is_empty()) {
            return Err(CheckpointError::Malformed("empty extension line"));
        }
        Ok(Checkpoint {
            origin: origin.to_string(),
            size,
            root,
            extensions,
        })
    }

    /// The signed note, signed by one Ed25519 key.
    pub fn sign(&self, signer: &NoteSigner) -> Result<Vec<u8>, NoteError> {
        sign_note(&self.to_text(), &[signer])
    }

    /// The signed note, one signature line per signer in order, signed at `timestamp`
    /// (milliseconds since the Unix epoch, for signers whose signatures carry one).
    pub fn sign_with(
        &self,
        signers: &[&dyn LogSigner],
        timestamp: u64,
    ) -> Result<Vec<u8>, NoteError> {
        sign_note_at(&self.to_text(), signers, timestamp)
    }

    /// Verify a signed checkpoint of the log `origin`.
    pub fn open(
        bytes: &[u8],
        origin: &str,
        verifier: &NoteVerifier,
    ) -> Result<(Checkpoint, Note), CheckpointError> {
        Self::open_with(bytes, origin, &[verifier])
    }

    /// Verify a signed checkpoint of the log `origin` known by several keys (a key
    /// rotation): signatures by any of them must verify, and at least one must be there.
    pub fn open_with(
        bytes: &[u8],
        origin: &str,
        verifiers: &[&NoteVerifier],
    ) -> Result<(Checkpoint, Note), CheckpointError> {
        let note = open_note(bytes, verifiers)?;
        let cp = Checkpoint::parse(&note.text)?;
        if cp.origin != origin {
            return Err(CheckpointError::WrongOrigin {
                expected: origin.to_string(),
                found: cp.origin,
            });
        }
        Ok((cp, note))
    }
}

/// The tree size on the second line of a signed checkpoint (tlog-checkpoint "Note
/// text"), without verifying anything: for storage that records which checkpoint is the
/// newest. `None` when there is no such line.
pub fn signed_size(signed: &[u8]) -> Option<u64> {
    signed
        .split(|&b| b == b'\n')
        .nth(1)
        .and_then(|l| std::str::from_utf8(l).ok())
        .and_then(|l| l.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_that_cannot_be_signed_or_stored_are_refused() {
        for ok in [
            "example.com/log",
            "a",
            "example.com/log with inner spaces+plus",
            "пример.рф/журнал",
            &"o".repeat(MAX_ORIGIN_LEN),
        ] {
            assert_eq!(validate_origin(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(validate_origin(""), Err(OriginError::Empty));
        let long = "o".repeat(MAX_ORIGIN_LEN + 1);
        assert_eq!(
            validate_origin(&long),
            Err(OriginError::TooLong(MAX_ORIGIN_LEN + 1))
        );
        // Multi-byte characters count in bytes, as the backends store them.
        let wide = "é".repeat(MAX_ORIGIN_LEN / 2 + 1);
        assert!(matches!(
            validate_origin(&wide),
            Err(OriginError::TooLong(_))
        ));
        for (bad, ch, at) in [
            ("a\nb", '\n', 1),
            ("ex\tample", '\t', 2),
            ("a\rb", '\r', 1),
            ("a\0", '\0', 1),
            ("del\u{7f}", '\u{7f}', 3),
            ("c1\u{85}x", '\u{85}', 2),
            ("\u{1b}[31mred", '\u{1b}', 0),
        ] {
            assert_eq!(
                validate_origin(bad),
                Err(OriginError::Control { ch, at }),
                "{bad:?}"
            );
        }
        for bad in [
            " example.com/log",
            "example.com/log ",
            "log\u{a0}",
            "\u{2003}log",
        ] {
            assert_eq!(
                validate_origin(bad),
                Err(OriginError::EdgeWhitespace),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_valid_origin_signs_and_parses_back() {
        // What validate_origin accepts, the note format must carry: otherwise the
        // daemon would accept adds and never publish.
        let (skey, _) = crate::note::generate_key("k").unwrap();
        let signer = NoteSigner::from_skey(&skey).unwrap();
        for origin in [
            "example.com/log",
            "in ner+plus",
            &"x".repeat(MAX_ORIGIN_LEN),
        ] {
            validate_origin(origin).unwrap();
            let cp = Checkpoint {
                origin: origin.to_string(),
                size: 1,
                root: [1; 32],
                extensions: vec![],
            };
            let signed = cp.sign(&signer).unwrap();
            let (back, _) = Checkpoint::open(&signed, origin, &signer.verifier()).unwrap();
            assert_eq!(back, cp);
        }
    }

    #[test]
    fn strict_parse_and_round_trip() {
        let cp = Checkpoint {
            origin: "example.com/log".into(),
            size: 15,
            root: [7u8; 32],
            extensions: vec!["ext one".into()],
        };
        assert_eq!(Checkpoint::parse(&cp.to_text()).unwrap(), cp);
        for bad in [
            "o\n01\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",
            "\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",
            "o\n1\nBwcH\n",
            "o\n-1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",
            "o\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=",
            "o\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n\n",
            "o\n1\n",
        ] {
            assert!(Checkpoint::parse(bad).is_err(), "{bad:?}");
        }
    }
}
