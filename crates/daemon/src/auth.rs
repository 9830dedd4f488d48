//! Write authentication: bearer tokens required on `POST /add` (RFC 6750); reads stay
//! public.
//!
//! Tokens come from a file or an environment variable, never from the command line
//! (argv is visible to every user of the machine). Only their SHA-256 digests are kept
//! in memory, a presented token is compared against every configured one in constant
//! time (`subtle`), and no token is ever logged: [`WriteTokens`]'s `Debug` prints only
//! how many there are.

use std::path::Path;

use axum::http::HeaderValue;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The environment variable holding write tokens (separated by newlines, commas or
/// spaces).
pub use crate::config::TOKENS_ENV;

/// Why the configured tokens could not be loaded. Messages name the source and line,
/// never a token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read.
    #[error("reading bearer token file {0}: {1}")]
    Read(String, std::io::Error),
    /// A token is not an RFC 6750 `b64token`.
    #[error(
        "{source_name}, token {position}: not a bearer token (allowed: letters, digits, -._~+/ and trailing =)"
    )]
    Invalid {
        /// Where the token came from.
        source_name: String,
        /// 1-based position of the token in its source.
        position: usize,
    },
    /// The source was configured but holds no token.
    #[error("{0} holds no bearer token")]
    Empty(String),
}

/// The result of checking a request's `Authorization` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A configured token was presented.
    Allowed,
    /// No bearer credentials (HTTP 401).
    Missing,
    /// Bearer credentials that match no configured token (HTTP 403).
    Wrong,
}

/// The set of accepted write tokens, as SHA-256 digests.
#[derive(Clone, Default)]
pub struct WriteTokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for WriteTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WriteTokens({} tokens, redacted)", self.digests.len())
    }
}

/// RFC 6750 section 2.1 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
/// "/" ) *"="`.
fn is_b64token(t: &str) -> bool {
    let body = t.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

impl WriteTokens {
    /// No tokens yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no token is configured (authentication is off).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Add the tokens in `text` (separated by newlines, commas or whitespace; lines
    /// starting with `#` are comments). `source_name` names the source in errors.
    pub fn add_text(&mut self, text: &str, source_name: &str) -> Result<(), TokenError> {
        let mut found = 0;
        for line in text.lines() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            for token in line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|t| !t.is_empty())
            {
                found += 1;
                if !is_b64token(token) {
                    return Err(TokenError::Invalid {
                        source_name: source_name.to_string(),
                        position: found,
                    });
                }
                self.digests.push(Sha256::digest(token.as_bytes()).into());
            }
        }
        if found == 0 {
            return Err(TokenError::Empty(source_name.to_string()));
        }
        Ok(())
    }

    /// Add the tokens of a file (see [`WriteTokens::add_text`]).
    pub fn add_file(&mut self, path: &Path) -> Result<(), TokenError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TokenError::Read(path.display().to_string(), e))?;
        self.add_text(&text, &format!("bearer token file {}", path.display()))
    }

    /// Check an `Authorization` header value. Every configured token is compared, in
    /// constant time, whatever the outcome: the time taken says nothing about which
    /// bytes of which token matched.
    pub fn check(&self, header: Option<&HeaderValue>) -> Verdict {
        let Some(presented) = header.and_then(bearer_credentials) else {
            return Verdict::Missing;
        };
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut matched = subtle::Choice::from(0u8);
        for d in &self.digests {
            matched |= d.ct_eq(&digest);
        }
        if bool::from(matched) {
            Verdict::Allowed
        } else {
            Verdict::Wrong
        }
    }
}

/// The credentials of an `Authorization: Bearer <token>` header (RFC 6750 section
/// 2.1; the scheme is case-insensitive, RFC 9110 section 11.1).
fn bearer_credentials(v: &HeaderValue) -> Option<&[u8]> {
    let b = v.as_bytes();
    if b.len() < 7 || !b[..6].eq_ignore_ascii_case(b"bearer") || b[6] != b' ' {
        return None;
    }
    let token = b[7..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The frontends' forwarding token file (`forward.token_file`): the token sent with
/// forwards (the first) and every token accepted from other frontends.
pub fn load_forward_tokens(path: &Path) -> Result<(String, WriteTokens), TokenError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TokenError::Read(path.display().to_string(), e))?;
    let mut tokens = WriteTokens::new();
    let source_name = format!("forward token file {}", path.display());
    tokens.add_text(&text, &source_name)?;
    let first = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
        .find(|t| !t.is_empty())
        .ok_or(TokenError::Empty(source_name))?;
    Ok((first.to_string(), tokens))
}

/// The tokens configured by `auth.bearer_tokens_file` and env [`TOKENS_ENV`] (both
/// may be used; their tokens add up). `None` when neither is set: writes are open.
pub fn load(file: Option<&Path>) -> Result<Option<WriteTokens>, TokenError> {
    let env = std::env::var(TOKENS_ENV).ok();
    if file.is_none() && env.is_none() {
        return Ok(None);
    }
    let mut tokens = WriteTokens::new();
    if let Some(path) = file {
        tokens.add_file(path)?;
    }
    if let Some(text) = env {
        tokens.add_text(&text, &format!("env {TOKENS_ENV}"))?;
    }
    Ok(Some(tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn tokens_parse_from_lines_commas_and_comments() {
        let mut t = WriteTokens::new();
        t.add_text("# writers\nalpha, beta\n\n  gamma=\n", "test")
            .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.check(Some(&h("Bearer alpha"))), Verdict::Allowed);
        assert_eq!(t.check(Some(&h("bearer beta"))), Verdict::Allowed);
        assert_eq!(t.check(Some(&h("Bearer gamma="))), Verdict::Allowed);
        assert_eq!(t.check(Some(&h("Bearer alph"))), Verdict::Wrong);
        assert_eq!(t.check(Some(&h("Bearer alphaa"))), Verdict::Wrong);
        assert_eq!(t.check(Some(&h("Bearer "))), Verdict::Missing);
        assert_eq!(t.check(Some(&h("Basic YWxwaGE="))), Verdict::Missing);
        assert_eq!(t.check(None), Verdict::Missing);
    }

    #[test]
    fn bad_sources_are_named_without_the_token() {
        let mut t = WriteTokens::new();
        let e = t.add_text("good\nsecret\"quote\n", "env X").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("env X, token 2"), "{msg}");
        assert!(!msg.contains("secret"), "{msg}");
        assert!(matches!(
            t.add_text("# only a comment\n", "f"),
            Err(TokenError::Empty(_))
        ));
        let mut t = WriteTokens::new();
        t.add_text("s3cret", "x").unwrap();
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
