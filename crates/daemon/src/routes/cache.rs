//! What a cache or CDN in front of a log needs (RFC 9110 §8.8.3 "ETag", §13.1.2
//! "If-None-Match", §15.4.5 "304 Not Modified"): a validator on every read that may be
//! kept, and `304` with no body when a cache revalidates what it holds, so that
//! revalidations cost neither a storage read nor the body's bytes.
//!
//! * Tiles, entry bundles, data tiles and issuers are immutable (tlog-tiles and
//!   static-ct-api: "This endpoint is immutable"): `Cache-Control: public,
//!   max-age=31536000, immutable`, and an ETag made of the path itself (the bytes at a
//!   path never change), with the content coding in it (a gzipped data tile is another
//!   representation). Revalidating one needs no read of storage.
//! * The checkpoint changes with every publication: `Cache-Control: no-cache` (a cache
//!   may keep it but asks before each use) and an ETag from a hash of its bytes, so a
//!   CDN's revalidation of an unchanged checkpoint is a `304`.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// `Cache-Control` of the immutable paths.
pub(crate) const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// `Cache-Control` of the checkpoint (and of what else changes in place).
pub(crate) const REVALIDATE: &str = "no-cache";

/// The ETag of an immutable path's bytes: the path, and `+gzip` for its gzipped form.
/// `None` for a path with a character an entity tag cannot hold (none of the paths this
/// daemon serves has one).
pub(crate) fn immutable_etag(path: &str, gzip: bool) -> Option<HeaderValue> {
    let coding = if gzip { "+gzip" } else { "" };
    // etagc = %x21 / %x23-7E: printable ASCII but the quote (RFC 9110 §8.8.3).
    if !path
        .bytes()
        .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b))
    {
        return None;
    }
    HeaderValue::from_str(&format!("\"{path}{coding}\"")).ok()
}

/// The ETag of bytes that change in place (the checkpoint): 96 bits of their SHA-256.
pub(crate) fn content_etag(bytes: &[u8]) -> HeaderValue {
    let tag = format!("\"{}\"", crate::answer::hex(&Sha256::digest(bytes)[..12]));
    // Quotes and hex digits only: always a valid header value.
    HeaderValue::from_str(&tag).unwrap_or(HeaderValue::from_static("\"\""))
}

/// Whether the request's `If-None-Match` names `etag` (or is `*`): the client holds
/// this representation. Weak comparison, as §13.1.2 asks for `If-None-Match`.
pub(crate) fn holds(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let etag = etag.as_bytes();
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|t| t.trim_ascii())
        .any(|t| t == b"*" || t.strip_prefix(b"W/").unwrap_or(t) == etag)
}

/// `304 Not Modified`: no body, and the headers a `200` would have carried that a
/// cache updates its copy with (§15.4.5).
pub(crate) fn not_modified(
    etag: HeaderValue,
    cache_control: &'static str,
    vary_encoding: bool,
) -> Response {
    let mut resp = StatusCode::NOT_MODIFIED.into_response();
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag);
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    if vary_encoding {
        h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::IF_NONE_MATCH, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn if_none_match_is_compared_weakly_in_lists_and_star() {
        let tag = immutable_etag("tile/0/001", false).expect("a tile path is a valid tag");
        assert_eq!(tag, "\"tile/0/001\"");
        assert!(holds(&asking(&["\"tile/0/001\""]), &tag));
        assert!(holds(&asking(&["W/\"tile/0/001\""]), &tag));
        assert!(holds(&asking(&["\"x\", \"tile/0/001\""]), &tag));
        assert!(holds(&asking(&["\"x\"", "\"tile/0/001\""]), &tag));
        assert!(holds(&asking(&["*"]), &tag));
        assert!(!holds(&asking(&[]), &tag));
        assert!(!holds(&asking(&["\"tile/0/002\""]), &tag));
        assert!(!holds(&asking(&["tile/0/001"]), &tag));
        let gz = immutable_etag("tile/data/000", true).expect("valid");
        assert!(!holds(&asking(&["\"tile/data/000\""]), &gz));
    }

    #[test]
    fn a_path_a_tag_cannot_hold_gets_none() {
        assert!(immutable_etag("tile/\"x", false).is_none());
        assert!(immutable_etag("tile/ x", false).is_none());
    }

    #[test]
    fn content_tags_differ_with_the_bytes() {
        let a = content_etag(b"origin\n1\nroot\n");
        assert_eq!(a.len(), 26);
        assert_ne!(a, content_etag(b"origin\n2\nroot\n"));
        assert_eq!(a, content_etag(b"origin\n1\nroot\n"));
    }
}
