//! A log's home page (#61): what a person who opens the log's URL in a browser needs
//! to know and check, on one small HTML page with no script and no outside asset.
//!
//! `GET /` (each log's own root under `[[logs]]`) answers a client that asks for HTML
//! (`Accept: text/html`, as browsers do); every other client gets the one-line `404`
//! it got before, so API clients and `curl` see no change. The page shows the origin,
//! the verifier keys (a CT log's ID, key and `log.v3.json`), the current checkpoint
//! with each signature and whose it is, how to submit, and a lookup form:
//! `GET /?index=N` shows entry N (a CT entry's certificate decoded), its leaf hash and
//! its inclusion proof in the current checkpoint, checked here by the verified reads
//! `tlogd verify` uses (`tlog_verify::reader::LogReader`) over this log's storage,
//! within a read turn like any tile read. Everything that came from a submitter or
//! storage is escaped; the page is `Cache-Control: no-store`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use tlog_verify::reader::LogReader;
use tlogd_core::engine::checker::{Fetch, StoredLog, VerifyError};
use tlogd_core::engine::{Log, LogStorage};
use tlogd_core::note::Note;
use tlogd_core::tile::TileId;

use crate::answer::hex;
use crate::routes::tiles::Reads;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The stylesheet, embedded: the page loads nothing else.
const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}\
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;border-bottom:1px solid #ddd;margin-top:2rem}\
code,pre{font:13px/1.4 ui-monospace,monospace;background:#f5f5f5;border-radius:3px}code{padding:0 .2rem;word-break:break-all}\
pre{padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}dd{margin:0}\
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}\
.ok{color:#176f2c;font-weight:600}.bad{color:#a61b1b;font-weight:600}.muted{color:#666}";

/// What the page of one log is made from.
pub(crate) struct Home<S: LogStorage> {
    pub(crate) reads: Arc<Reads<S>>,
    pub(crate) ct: Option<Arc<crate::routes::ct::CtLog>>,
    /// The CT log's `log.v3.json` is served (a shard).
    pub(crate) log_v3: bool,
    /// Adds need a bearer token.
    pub(crate) writes_need_token: bool,
}

/// `?index=N`.
#[derive(serde::Deserialize)]
pub(crate) struct Lookup {
    index: Option<String>,
}

/// Whether the client asks for HTML (a browser), not `*/*` alone (an API client).
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let mut parts = t.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let refused = parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.trim() == "0"));
            (media.eq_ignore_ascii_case("text/html")
                || media.eq_ignore_ascii_case("application/xhtml+xml"))
                && !refused
        })
}

/// Text for HTML: `& < > " '` escaped.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An HTML page: `text/html`, never cached.
pub(crate) fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n{body}\n</body></html>\n",
        escape(title)
    );
    let mut resp = (status, html).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ),
    );
    resp
}

/// The page listing the logs of a daemon with several (`/` under `[[logs]]`).
pub(crate) fn listing(logs: &[(String, String)]) -> Response {
    let mut body = String::from(
        "<header><h1>Transparency logs</h1><p class=\"muted\">Served by tlogd.</p></header><ul>",
    );
    for (name, origin) in logs {
        let _ = write!(
            body,
            "<li><a href=\"/{n}/\">{o}</a> <span class=\"muted\">(<code>/{n}/</code>)</span></li>",
            n = escape(name),
            o = escape(origin)
        );
    }
    body.push_str("</ul>");
    page(StatusCode::OK, "Transparency logs", &body)
}

/// The log's storage read as a [`Fetch`], with the checkpoint the log serves.
struct Served<'a, S: LogStorage>(&'a Log<S>);

impl<S: LogStorage> Fetch for Served<'_, S> {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        if path == "checkpoint" {
            return self
                .0
                .latest_checkpoint()
                .await
                .map_err(|e| VerifyError::Fetch(format!("checkpoint: {e}")));
        }
        if let Ok(id) = TileId::parse(path) {
            return self
                .0
                .storage()
                .read_public_tile(&id)
                .await
                .map(|b| b.map(Bytes::from))
                .map_err(|e| VerifyError::Fetch(format!("{path}: {e}")));
        }
        StoredLog(self.0.storage().as_ref()).get(path).await
    }

    fn location(&self) -> String {
        "this log's storage".into()
    }
}

/// `GET /` of one log.
pub(crate) async fn home<S: LogStorage>(
    State(home): State<Arc<Home<S>>>,
    headers: HeaderMap,
    Query(lookup): Query<Lookup>,
) -> Response {
    let log = &home.reads.log;
    let cfg = log.config();
    if !wants_html(&headers) {
        crate::answer::read_metric("other", StatusCode::NOT_FOUND, &cfg.name);
        return crate::answer::text(StatusCode::NOT_FOUND, "/ not found");
    }
    crate::answer::read_metric("home", StatusCode::OK, &cfg.name);
    let kind = if home.ct.is_some() {
        "a Certificate Transparency log (C2SP static-ct-api)"
    } else {
        "a transparency log (C2SP tlog-tiles)"
    };
    let mut body = format!(
        "<header><h1>{}</h1><p class=\"muted\">{kind}, served by tlogd {}.</p></header>\n",
        escape(&cfg.origin),
        env!("CARGO_PKG_VERSION")
    );
    let checkpoint = log.latest_checkpoint().await.ok().flatten();
    body.push_str("<section id=\"checkpoint\"><h2>Current checkpoint</h2>");
    match &checkpoint {
        Some(cp) => checkpoint_section(&mut body, cp, &cfg.origin),
        None => body.push_str("<p>No checkpoint published yet.</p>"),
    }
    body.push_str("</section>\n<section id=\"keys\"><h2>Verifier keys</h2><ul>");
    for signer in &cfg.signers {
        let _ = write!(
            body,
            "<li><code>{}</code></li>",
            escape(&signer.verifier().to_vkey())
        );
    }
    body.push_str("</ul>");
    if let Some(ct) = &home.ct {
        let key = ct.key();
        let _ = write!(
            body,
            "<dl><dt>Log ID</dt><dd><code>{}</code></dd><dt>Public key</dt><dd><code>{}</code></dd></dl>",
            B64.encode(key.log_id()),
            B64.encode(key.public_key_der())
        );
        if home.log_v3 {
            body.push_str("<p>This log's entry for log lists: <a href=\"log.v3.json\"><code>log.v3.json</code></a>.</p>");
        }
    }
    body.push_str("</section>\n<section id=\"submit\"><h2>Submitting</h2>");
    let token = if home.writes_need_token {
        " -H 'Authorization: Bearer TOKEN'"
    } else {
        ""
    };
    if home.ct.is_some() {
        let _ = write!(
            body,
            "<p>RFC 6962 submissions: <code>POST ct/v1/add-chain</code> and <code>POST ct/v1/add-pre-chain</code> \
             with <code>{{\"chain\": [base64 DER, ...]}}</code>, leaf first, ending at one of the roots in \
             <a href=\"ct/v1/get-roots\"><code>ct/v1/get-roots</code></a>. The answer is an SCT whose extension names \
             the entry's index.</p><pre>curl{token} --data @chain.json {}ct/v1/add-chain</pre>\
             <p class=\"muted\"><code>$LOG</code>: this page's address.</p>",
            LOG_URL
        );
    } else {
        let _ = write!(
            body,
            "<p><code>POST add</code> with the entry as the body (1 to 65,535 bytes). The answer, once the entry \
             and a tree holding it are durable, is its index; the same bytes again get the same index.</p>\
             <pre>curl{token} --data-binary @entry {}add</pre>\
             <p class=\"muted\"><code>$LOG</code>: this page's address.</p>",
            LOG_URL
        );
    }
    body.push_str(
        "<p>Reading: <a href=\"checkpoint\"><code>checkpoint</code></a>, then the tiles and bundles it names \
         (<code>tile/&lt;L&gt;/&lt;N&gt;</code>, <code>tile/entries/&lt;N&gt;</code> or <code>tile/data/&lt;N&gt;</code>), \
         as C2SP tlog-tiles and static-ct-api say.</p></section>\n",
    );
    let size = checkpoint
        .as_deref()
        .and_then(tlogd_core::checkpoint::signed_size)
        .unwrap_or(0);
    let asked = lookup
        .index
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let _ = write!(
        body,
        "<section id=\"lookup\"><h2>Look an entry up</h2><form method=\"get\" action=\"\">\
         <label>Index <input name=\"index\" type=\"number\" min=\"0\"{} value=\"{}\"></label> \
         <button type=\"submit\">Look up</button></form>",
        if size > 0 {
            format!(" max=\"{}\"", size - 1)
        } else {
            String::new()
        },
        escape(asked.unwrap_or_default())
    );
    let mut status = StatusCode::OK;
    if let Some(asked) = asked {
        match asked.parse::<u64>() {
            Ok(index) => {
                if let Err(e) = entry_section(&mut body, &home, index).await {
                    status = e.0;
                    let _ = write!(
                        body,
                        "<p class=\"bad\" id=\"lookup-error\">{}</p>",
                        escape(&e.1)
                    );
                }
            }
            Err(_) => {
                status = StatusCode::BAD_REQUEST;
                let _ = write!(
                    body,
                    "<p class=\"bad\" id=\"lookup-error\">{} is not an index (0, 1, 2, ...).</p>",
                    escape(asked)
                );
            }
        }
    }
    body.push_str("</section>");
    page(status, &cfg.origin, &body)
}

/// This log's root in the examples: the page's own address (the scheme and path
/// prefix a proxy may add are not known here, so it is named, not guessed).
const LOG_URL: &str = "$LOG/";

/// The checkpoint's body and signature lines, each named.
fn checkpoint_section(body: &mut String, cp: &[u8], origin: &str) {
    let text = String::from_utf8_lossy(cp);
    // The checkpoint this log published: it parses (signed-note "Format").
    let note = Note::parse(cp).unwrap_or(Note {
        text: text.to_string(),
        signatures: Vec::new(),
    });
    let mut lines = note.text.lines();
    let _ = lines.next();
    let size = lines.next().unwrap_or_default();
    let root = lines.next().unwrap_or_default();
    let _ = write!(
        body,
        "<dl><dt>Tree size</dt><dd id=\"tree-size\">{}</dd><dt>Root hash</dt><dd><code>{}</code></dd></dl>",
        escape(size),
        escape(root)
    );
    body.push_str("<table><tr><th>Signed by</th><th>Key ID</th><th>What</th></tr>");
    for sig in &note.signatures {
        let what = if sig.name == origin {
            "the log's signature".to_string()
        } else if sig.name == tlogd_core::engine::GREASE_NAME {
            "grease: a line of no key, which clients must ignore".to_string()
        } else if let Some(t) = sig
            .signature
            .get(..8)
            .filter(|_| sig.signature.len() == 8 + 64)
        {
            // tlog-cosignature: an 8-byte big-endian timestamp, then Ed25519.
            let mut secs = [0u8; 8];
            secs.copy_from_slice(t);
            format!(
                "a witness's cosignature, at {}",
                crate::routes::ct_shard::format_rfc3339_ms(
                    u64::from_be_bytes(secs).saturating_mul(1000)
                )
            )
        } else {
            "another signature".to_string()
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td><code>{:08x}</code></td><td>{}</td></tr>",
            escape(&sig.name),
            sig.key_id,
            escape(&what)
        );
    }
    let _ = write!(
        body,
        "</table><details><summary>The checkpoint as served</summary><pre>{}</pre></details>",
        escape(&text)
    );
}

/// Entry `index`: its bytes (or certificate), its leaf hash and its inclusion proof
/// in the current checkpoint, checked. On failure, the status and one line.
async fn entry_section<S: LogStorage>(
    body: &mut String,
    home: &Home<S>,
    index: u64,
) -> Result<(), (StatusCode, String)> {
    let log = &home.reads.log;
    let cfg = log.config();
    let Some(signer) = cfg.signers.first() else {
        return Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            "the log has no key".into(),
        ));
    };
    let _turn = home.reads.turn("home").await.map_err(|_| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many reads in progress; retry later".to_string(),
        )
    })?;
    let mut reader = LogReader::new(Served(log), cfg.origin.clone(), signer.verifier());
    if home.ct.is_some() {
        reader = reader.with_personality(cfg.personality.clone());
    }
    let failed = |e: VerifyError| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the log: {e}"),
        )
    };
    let cp = reader.checkpoint().await.map_err(failed)?;
    if index >= cp.size {
        return Err((
            StatusCode::NOT_FOUND,
            format!(
                "No entry {index}: the current tree has {} entries (0 to {}).",
                cp.size,
                cp.size.saturating_sub(1)
            ),
        ));
    }
    let bundle = reader.bundle(index / 256, cp.size).await.map_err(failed)?;
    let entry = bundle.get((index % 256) as usize).ok_or_else(|| {
        failed(VerifyError::Invalid(format!(
            "bundle {} is short",
            index / 256
        )))
    })?;
    let leaf = reader.leaf_hash(entry);
    let ids = tlogd_core::proof::inclusion_proof_tiles(index, cp.size)
        .map_err(|e| failed(VerifyError::Invalid(e.to_string())))?;
    let mut tiles = std::collections::HashMap::new();
    for id in ids {
        let hashes = reader.tile(&id).await.map_err(failed)?;
        tiles.insert(id, hashes);
    }
    let proof = tlogd_core::proof::inclusion_proof(index, cp.size, &tiles)
        .map_err(|e| failed(VerifyError::Invalid(e.to_string())))?;
    let verdict = reader.verify_inclusion(&cp, index, &leaf).await;
    let _ = write!(body, "<div id=\"entry\"><h3>Entry {index}</h3>");
    match &home.ct {
        Some(_) => ct_entry(body, entry),
        None => {
            let _ = write!(body, "<p>{} bytes:</p>", entry.len());
            match std::str::from_utf8(entry) {
                Ok(s) => {
                    let _ = write!(body, "<pre id=\"entry-text\">{}</pre>", escape(s));
                }
                Err(_) => {
                    let shown = &entry[..entry.len().min(1024)];
                    let _ = write!(
                        body,
                        "<pre id=\"entry-hex\">{}{}</pre>",
                        hex(shown),
                        if shown.len() < entry.len() {
                            " ..."
                        } else {
                            ""
                        }
                    );
                }
            }
        }
    }
    let _ = write!(
        body,
        "<dl><dt>Leaf hash</dt><dd><code>{}</code></dd><dt>Tree size</dt><dd>{}</dd><dt>Root hash</dt><dd><code>{}</code></dd></dl>",
        B64.encode(leaf),
        cp.size,
        B64.encode(cp.root)
    );
    body.push_str("<p>Inclusion proof (RFC 9162 §2.1.3), from the leaf up:</p><ol>");
    for h in &proof {
        let _ = write!(body, "<li><code>{}</code></li>", B64.encode(h));
    }
    body.push_str("</ol>");
    match verdict {
        Ok(()) => {
            let _ = write!(
                body,
                "<p class=\"ok\" id=\"verdict\">Verified: the entry's leaf hash and this proof give the root hash of the checkpoint of size {}, whose signature by this log's key was checked.</p>",
                cp.size
            );
        }
        Err(e) => {
            let _ = write!(
                body,
                "<p class=\"bad\" id=\"verdict\">Not verified: {}</p>",
                escape(&e.to_string())
            );
        }
    }
    body.push_str("</div>");
    Ok(())
}

/// A CT entry: its certificate's subject, issuer, names and validity, and its SCT's
/// timestamp.
fn ct_entry(body: &mut String, entry: &[u8]) {
    let leaf = match tlogd_static_ct::parse_data_tile(entry) {
        Ok(mut leaves) if leaves.len() == 1 => leaves.remove(0),
        _ => {
            body.push_str("<p class=\"bad\">The entry is not one static-ct-api TileLeaf.</p>");
            return;
        }
    };
    let te = &leaf.timestamped_entry;
    let (what, der) = match (&te.entry, &leaf.pre_certificate) {
        (tlogd_static_ct::LogEntry::X509 { certificate }, _) => {
            ("Certificate", certificate.as_slice())
        }
        (_, Some(pre)) => ("Precertificate", pre.as_slice()),
        _ => ("Precertificate", &[][..]),
    };
    let _ = write!(
        body,
        "<dl><dt>Kind</dt><dd>{what}</dd><dt>Logged at</dt><dd>{}</dd>",
        crate::routes::ct_shard::format_rfc3339_ms(te.timestamp)
    );
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => {
            let names: Vec<String> = match cert.subject_alternative_name() {
                Ok(Some(san)) => san
                    .value
                    .general_names
                    .iter()
                    .map(|n| match n {
                        x509_parser::extensions::GeneralName::DNSName(d) => d.to_string(),
                        x509_parser::extensions::GeneralName::IPAddress(ip) => {
                            format!("IP {}", hex(ip))
                        }
                        other => format!("{other:?}"),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let _ = write!(
                body,
                "<dt>Subject</dt><dd id=\"cert-subject\">{}</dd><dt>Issuer</dt><dd>{}</dd><dt>Names</dt><dd>{}</dd>\
                 <dt>Valid</dt><dd>{} to {}</dd><dt>Serial</dt><dd><code>{}</code></dd>",
                escape(&cert.subject().to_string()),
                escape(&cert.issuer().to_string()),
                escape(&names.join(", ")),
                crate::routes::ct_shard::format_rfc3339_ms(
                    u64::try_from(cert.validity().not_before.timestamp()).unwrap_or(0) * 1000
                ),
                crate::routes::ct_shard::format_rfc3339_ms(
                    u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0) * 1000
                ),
                hex(cert.raw_serial())
            );
        }
        Err(e) => {
            let _ = write!(
                body,
                "<dt>Certificate</dt><dd class=\"bad\">not parsed: {}</dd>",
                escape(&e.to_string())
            );
        }
    }
    body.push_str("</dl>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browsers_get_html_and_api_clients_do_not() {
        let with = |accept: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(accept));
            wants_html(&h)
        };
        assert!(with(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        ));
        assert!(with("application/xhtml+xml"));
        assert!(!with("*/*"));
        assert!(!with("application/json"));
        assert!(!with("text/html;q=0"));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn what_came_from_outside_is_escaped() {
        assert_eq!(
            escape("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }
}
