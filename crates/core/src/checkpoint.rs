//! Checkpoints (tlog-checkpoint.md "Note text"): origin, size, root, extension lines.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::hash::Hash;
use crate::note::{Note, NoteError, NoteSigner, NoteVerifier, open_note, sign_note};

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

    /// The signed note.
    pub fn sign(&self, signer: &NoteSigner) -> Result<Vec<u8>, NoteError> {
        sign_note(&self.to_text(), &[signer])
    }

    /// Verify a signed checkpoint of the log `origin`.
    pub fn open(
        bytes: &[u8],
        origin: &str,
        verifier: &NoteVerifier,
    ) -> Result<(Checkpoint, Note), CheckpointError> {
        let note = open_note(bytes, &[verifier])?;
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
