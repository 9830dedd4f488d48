//! A CT log's roots over time (#60): what `[ct]` names (`roots_file`, `roots_url`)
//! merged into the set kept in the log's storage, refreshed every
//! `roots_refresh_interval_s` and on SIGHUP.
//!
//! The root programs add roots, and a log must follow them without a restart; but a
//! root once accepted is never dropped by a refresh, since entries already logged
//! chain to it and a source caught half-written or rolled back must not shrink the set
//! (Sunlight, TesseraCT and Azul all keep roots append-only). Only the operator removes
//! a root, by its fingerprint (`roots_reject_fingerprints`).
//!
//! One refresh:
//! 1. Read each source: the file, each URL (a CCADB CSV report or a PEM bundle). A
//!    source that fails, answers garbled or partial bytes, or holds no root
//!    contributes nothing this time (a `warn` line naming it,
//!    `tlogd_ct_roots_fetches_total{result="error"}`); the others still count.
//! 2. Read the newest stored set ([`tlogd_core::engine::versioned`], at
//!    [`ROOTS_PREFIX`]): what any frontend of the store merged before.
//! 3. Merge, in this order so that every frontend lists them alike: the stored set,
//!    the roots in force here, each source's; then take the rejected ones out.
//! 4. If that differs from the stored set, write it as the next version: on a lost
//!    race (another frontend wrote that version first) go back to 2 and merge onto its
//!    set. A store that refuses the write leaves the merged set in force here, and the
//!    next refresh writes it.
//! 5. The merged set is in force: `get-roots` answers it and chains under a new root
//!    validate from the next request on.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use tlogd_core::engine::LogStorage;
use tlogd_core::engine::versioned::{self, Written};
use tlogd_ct::chain::Roots;

use crate::answer::hex;
use crate::config::CtConfig;

/// Where the merged set lives in the log's storage: version `n` at `ct/roots/<n>`, a
/// PEM bundle with each root's subject and fingerprint in comments.
pub const ROOTS_PREFIX: &str = "ct/roots";

/// The largest roots document fetched (the CCADB's reports are a few MiB).
const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// The CCADB column of a root's certificate, and of its uses.
const CCADB_PEM_COLUMN: &str = "X.509 Certificate (PEM)";
const CCADB_USES_COLUMN: &str = "Intended Use Case(s) Served";
/// id-kp-serverAuth: the use a CT log's roots must serve (a row of the CCADB's reports
/// says `Server Authentication (TLS) 1.3.6.1.5.5.7.3.1`).
const SERVER_AUTH_OID: &str = "1.3.6.1.5.5.7.3.1";

/// The roots and the `get-roots` answer they give.
pub(crate) struct LoadedRoots {
    pub(crate) roots: Roots,
    pub(crate) get_roots: Bytes,
}

impl LoadedRoots {
    fn new(roots: Roots) -> Self {
        let certificates: Vec<String> = roots.ders().map(|d| B64.encode(d)).collect();
        let get_roots = serde_json::json!({ "certificates": certificates }).to_string();
        LoadedRoots {
            roots,
            get_roots: Bytes::from(get_roots),
        }
    }
}

/// A CT log's roots: the set in force and where more come from.
pub struct RootSet {
    loaded: RwLock<Arc<LoadedRoots>>,
    file: Option<PathBuf>,
    urls: Vec<String>,
    reject: HashSet<[u8; 32]>,
    interval: Duration,
    timeout: Duration,
    /// The newest stored version read or written (0: none yet).
    version: AtomicU64,
    /// A refresh asked for (SIGHUP).
    now: tokio::sync::Notify,
    label: String,
}

impl std::fmt::Debug for RootSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootSet")
            .field("file", &self.file)
            .field("urls", &self.urls)
            .field("roots", &self.current().roots.len())
            .finish_non_exhaustive()
    }
}

/// What one refresh found.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// Roots in force after it.
    pub roots: usize,
    /// Roots it added to those in force.
    pub added: usize,
    /// The sources that failed, with why.
    pub failed: Vec<String>,
}

impl RootSet {
    /// The roots of `[ct]` as far as they can be known before the storage is open:
    /// the file's, if any (a file that cannot be read stops the start).
    pub fn load(config: &CtConfig, label: &str) -> anyhow::Result<Self> {
        let roots = match &config.roots_file {
            Some(path) => read_file(path)?,
            None => Roots::default(),
        };
        let reject = config
            .roots_reject_fingerprints
            .iter()
            .map(|f| crate::config::parse_fingerprint(f))
            .collect::<anyhow::Result<HashSet<_>>>()
            .context("`ct.roots_reject_fingerprints`")?;
        let roots = roots.without(|fp| reject.contains(fp));
        Ok(RootSet {
            loaded: RwLock::new(Arc::new(LoadedRoots::new(roots))),
            file: config.roots_file.clone(),
            urls: config.roots_url.clone(),
            reject,
            interval: Duration::from_secs(config.roots_refresh_interval_s.max(1)),
            timeout: Duration::from_millis(config.roots_fetch_timeout_ms.max(1)),
            version: AtomicU64::new(0),
            now: tokio::sync::Notify::new(),
            label: label.to_string(),
        })
    }

    /// The roots in force.
    pub(crate) fn current(&self) -> Arc<LoadedRoots> {
        self.loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Refresh at once (SIGHUP), in the background.
    pub fn refresh_soon(&self) {
        self.now.notify_one();
    }

    /// Open the roots over the log's storage: the stored set merged with the file's;
    /// the URLs fetched now only if that leaves no root (else in the background, at
    /// once); then refreshed every interval and on [`refresh_soon`](Self::refresh_soon).
    /// A log left with no root does not start.
    pub async fn open<S: LogStorage>(self: &Arc<Self>, storage: Arc<S>) -> anyhow::Result<()> {
        for result in ["ok", "error"] {
            metrics::counter!("tlogd_ct_roots_fetches_total", "log" => self.label.clone(), "result" => result)
                .increment(0);
        }
        let first = self.refresh(&*storage, false).await;
        let mut fetched = false;
        if self.current().roots.is_empty() && !self.urls.is_empty() {
            let r = self.refresh(&*storage, true).await;
            report(&self.label, &r);
            fetched = true;
        } else {
            report(&self.label, &first);
        }
        let n = self.current().roots.len();
        if n == 0 {
            anyhow::bail!(
                "the CT log has no roots: {}",
                if self.urls.is_empty() {
                    "`ct.roots_file` holds no usable certificate"
                } else {
                    "its `roots_url` could not be read and none were stored before (see the warnings above)"
                }
            );
        }
        tracing::info!(log = %self.label, roots = n, "CT roots loaded");
        let set = self.clone();
        tokio::spawn(async move {
            let mut due_now = !fetched && !set.urls.is_empty();
            loop {
                if !due_now {
                    tokio::select! {
                        _ = tokio::time::sleep(set.interval) => {}
                        _ = set.now.notified() => {}
                    }
                }
                due_now = false;
                let r = set.refresh(&*storage, true).await;
                report(&set.label, &r);
            }
        });
        Ok(())
    }

    /// One refresh (the module's steps); `fetch`: read the URLs too.
    pub async fn refresh<S: LogStorage>(&self, storage: &S, fetch: bool) -> Refreshed {
        let mut out = Refreshed::default();
        // 1. The sources.
        let mut fresh: Vec<Roots> = Vec::new();
        if let Some(path) = &self.file {
            match read_file(path) {
                Ok(r) => fresh.push(r),
                Err(e) => out.failed.push(format!("{e:#}")),
            }
        }
        if fetch {
            for url in &self.urls {
                let result = fetch_document(url, self.timeout).await;
                let outcome = if result.is_ok() { "ok" } else { "error" };
                metrics::counter!("tlogd_ct_roots_fetches_total", "log" => self.label.clone(), "result" => outcome)
                    .increment(1);
                match result {
                    Ok(r) => fresh.push(r),
                    Err(e) => out.failed.push(format!("`ct.roots_url` {url}: {e}")),
                }
            }
        }
        let before = self.current();
        // In force here whatever the store answers (a store that cannot be read must
        // not cost the roots just fetched).
        let mut merged = before.roots.clone();
        for r in &fresh {
            merged = merged.union(r);
        }
        merged = merged.without(|fp| self.reject.contains(fp));
        // 2-4. Merged onto the newest stored set, written if it adds to it.
        let mut stored_ok = false;
        for _ in 0..8 {
            let known = self.version.load(Ordering::Relaxed);
            let stored = match versioned::newest(storage, ROOTS_PREFIX, known).await {
                Ok(s) => s,
                Err(e) => {
                    out.failed.push(format!("reading the stored roots: {e}"));
                    break;
                }
            };
            let mut unreadable = false;
            let (version, stored_roots) = match &stored {
                Some((v, bytes)) => {
                    let (r, warnings) = Roots::from_pem(bytes);
                    for w in &warnings {
                        tracing::warn!(log = %self.label, version = v, "stored CT roots: {w}");
                    }
                    unreadable = !warnings.is_empty();
                    (*v, r)
                }
                None => (0, Roots::default()),
            };
            self.version.fetch_max(version, Ordering::Relaxed);
            let mut m = stored_roots.union(&before.roots);
            for r in &fresh {
                m = m.union(r);
            }
            m = m.without(|fp| self.reject.contains(fp));
            merged = m;
            if merged.is_empty() || (stored.is_some() && same_set(&merged, &stored_roots)) {
                stored_ok = true;
                break;
            }
            if unreadable {
                // Rewriting it would drop the blocks that no longer parse here (a
                // newer release's format?): the set stays in force, the store as is.
                out.failed.push(format!(
                    "the stored roots (version {version}) hold blocks this release cannot read; not rewritten"
                ));
                stored_ok = true;
                break;
            }
            let pem = to_pem(&merged);
            match versioned::write(
                storage,
                ROOTS_PREFIX,
                version + 1,
                pem.as_bytes(),
                "application/x-pem-file",
            )
            .await
            {
                Ok(Written::Won) => {
                    self.version.fetch_max(version + 1, Ordering::Relaxed);
                    tracing::info!(log = %self.label, version = version + 1, roots = merged.len(), "CT roots stored");
                    stored_ok = true;
                    break;
                }
                Ok(Written::Lost) => continue,
                Err(e) => {
                    out.failed.push(format!(
                        "storing the roots (kept in force here, stored at the next refresh): {e}"
                    ));
                    stored_ok = true;
                    break;
                }
            }
        }
        if !stored_ok && out.failed.is_empty() {
            out.failed.push(
                "storing the roots: other frontends kept writing first; stored at the next refresh"
                    .into(),
            );
        }
        // 5. In force.
        out.roots = merged.len();
        for (fp, subject, _) in merged.entries() {
            if !before.roots.contains(&fp) {
                out.added += 1;
                // Not at start-up, where every root is new.
                if !before.roots.is_empty() {
                    tracing::info!(log = %self.label, subject, sha256 = %hex(&fp), "CT root added");
                }
            }
        }
        if !same_set(&merged, &before.roots) {
            *self.loaded.write().unwrap_or_else(|e| e.into_inner()) =
                Arc::new(LoadedRoots::new(merged));
        }
        metrics::gauge!("tlogd_ct_roots", "log" => self.label.clone()).set(out.roots as f64);
        if out.failed.is_empty() && fetch {
            metrics::gauge!("tlogd_ct_roots_last_refresh_timestamp_seconds", "log" => self.label.clone())
                .set(crate::answer::now_ms() as f64 / 1000.0);
        }
        out
    }
}

fn report(label: &str, r: &Refreshed) {
    for why in &r.failed {
        tracing::warn!(log = %label, roots = r.roots, "CT roots: {why}; the roots in force stay");
    }
    if r.added > 0 {
        tracing::info!(log = %label, added = r.added, roots = r.roots, "CT roots refreshed");
    }
}

/// Whether two sets hold the same roots (by fingerprint), whatever their order.
fn same_set(a: &Roots, b: &Roots) -> bool {
    a.len() == b.len() && a.fingerprints().all(|fp| b.contains(fp))
}

/// The stored form: a PEM bundle, each root under its subject and fingerprint.
fn to_pem(roots: &Roots) -> String {
    let mut out = String::new();
    for (fp, subject, der) in roots.entries() {
        let subject: String = subject.chars().filter(|c| !c.is_control()).collect();
        out.push_str(&format!("# {subject}\n# SHA-256 {}\n", hex(&fp)));
        out.push_str(&tlogd_ct::chain::certificate_pem(der));
        out.push('\n');
    }
    out
}

/// `ct.roots_file`: every block that parses (a bad one is skipped with a warning, as
/// an operator's file always was).
fn read_file(path: &Path) -> anyhow::Result<Roots> {
    let pem = std::fs::read(path)
        .with_context(|| format!("reading `ct.roots_file` {}", path.display()))?;
    let (roots, warnings) = Roots::from_pem(&pem);
    for w in warnings {
        tracing::warn!(file = %path.display(), "`ct.roots_file`: skipped a block: {w}");
    }
    if roots.is_empty() {
        anyhow::bail!(
            "`ct.roots_file` {} holds no certificate: a CT log needs at least one root",
            path.display()
        );
    }
    Ok(roots)
}

/// GET `url` (redirects are not followed) and parse it ([`parse_document`]).
async fn fetch_document(url: &str, timeout: Duration) -> Result<Roots, String> {
    use tlogd_http::client::{BaseUrl, Client};
    // The base is the scheme and authority; the path (and query) is requested as is.
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let (base, path) = match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, "/"),
    };
    let base = BaseUrl::parse(base).map_err(|e| e.to_string())?;
    let mut client = Client::new(base, None, timeout)
        .map_err(|e| e.to_string())?
        .with_max_body(MAX_DOCUMENT_BYTES);
    let r = client
        .send(axum::http::Method::GET, path, Bytes::new())
        .await
        .map_err(|e| e.to_string())?;
    match r.status.as_u16() {
        200 => parse_document(&r.body),
        300..=399 => Err(format!(
            "HTTP {} (redirects are not followed: give the URL it names)",
            r.status
        )),
        _ => Err(format!("HTTP {}", r.status)),
    }
}

/// A roots document: a CCADB CSV report (its header names the column
/// `X.509 Certificate (PEM)`) or a PEM bundle. All or nothing: a row or a block that
/// does not parse (a truncated download, a garbled file) refuses the whole document,
/// and so does one without a root.
pub fn parse_document(body: &[u8]) -> Result<Roots, String> {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let first_line = body.split(|&b| b == b'\n').next().unwrap_or_default();
    let roots = if first_line
        .windows(CCADB_PEM_COLUMN.len())
        .any(|w| w == CCADB_PEM_COLUMN.as_bytes())
    {
        parse_ccadb_csv(body)?
    } else if body
        .windows(b"-----BEGIN CERTIFICATE-----".len())
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        let (roots, warnings) = Roots::from_pem(body);
        if let Some(w) = warnings.first() {
            return Err(format!("a PEM bundle with a bad block: {w}"));
        }
        roots
    } else {
        return Err(format!(
            "neither a CCADB CSV report (no {CCADB_PEM_COLUMN:?} column) nor a PEM bundle"
        ));
    };
    if roots.is_empty() {
        return Err("no root in it".into());
    }
    Ok(roots)
}

/// The roots of a CCADB CSV report that serve TLS server authentication.
fn parse_ccadb_csv(body: &[u8]) -> Result<Roots, String> {
    // Quotes come in pairs ("" inside a field is two): an odd count is a document cut
    // inside a quoted field, which the reader would take as the field's end.
    if !body
        .iter()
        .filter(|&&b| b == b'"')
        .count()
        .is_multiple_of(2)
    {
        return Err("CCADB CSV ends inside a quoted field (truncated?)".into());
    }
    let mut reader = csv::ReaderBuilder::new().from_reader(body);
    let header = reader
        .headers()
        .map_err(|e| format!("CCADB CSV header: {e}"))?
        .clone();
    let column = |name: &str| header.iter().position(|h| h.trim() == name);
    let pem_at = column(CCADB_PEM_COLUMN)
        .ok_or_else(|| format!("CCADB CSV without a {CCADB_PEM_COLUMN:?} column"))?;
    let uses_at = column(CCADB_USES_COLUMN);
    let mut pem = Vec::new();
    for (n, record) in reader.records().enumerate() {
        let row = n + 2;
        let record = record.map_err(|e| format!("CCADB CSV row {row}: {e} (truncated?)"))?;
        let cert = record.get(pem_at).unwrap_or_default().trim();
        // The reports hold an example row with no certificate.
        if cert.is_empty() {
            continue;
        }
        if let Some(u) = uses_at
            && !record.get(u).unwrap_or_default().contains(SERVER_AUTH_OID)
        {
            continue;
        }
        let (one, warnings) = Roots::from_pem(cert.as_bytes());
        if let Some(w) = warnings.first() {
            return Err(format!("CCADB CSV row {row}: {w}"));
        }
        if one.len() != 1 {
            return Err(format!(
                "CCADB CSV row {row}: {} certificates in its PEM column, not one",
                one.len()
            ));
        }
        pem.extend_from_slice(cert.as_bytes());
        pem.push(b'\n');
    }
    let (roots, warnings) = Roots::from_pem(&pem);
    match warnings.first() {
        Some(w) => Err(format!("CCADB CSV: {w}")),
        None => Ok(roots),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = include_str!("../../../ct/testdata/chains/tesseract/test_root_ca_cert.pem");
    const HAMMER_ROOT: &str =
        include_str!("../../../ct/testdata/chains/tesseract/hammer/test_root_ca_cert.pem");

    fn csv(rows: &[(&str, &str)]) -> String {
        let mut out = String::from(
            "\u{feff}\"Certificate Name\",\"X.509 Certificate (PEM)\",\"Intended Use Case(s) Served\"\r\n\"Example CA\",\"\",\"\"\r\n",
        );
        for (pem, uses) in rows {
            out.push_str(&format!("\"root\",\"{}\",\"{uses}\"\r\n", pem.trim()));
        }
        out
    }

    #[test]
    fn a_ccadb_report_gives_its_tls_roots() {
        let tls = "Server Authentication (TLS) 1.3.6.1.5.5.7.3.1";
        let roots = parse_document(
            csv(&[
                (ROOT, tls),
                (HAMMER_ROOT, "Secure Email (SMIME) 1.3.6.1.5.5.7.3.4"),
            ])
            .as_bytes(),
        )
        .expect("parsed");
        assert_eq!(roots.len(), 1);
        // Without the uses column, every row counts.
        let no_uses = format!(
            "\"X.509 Certificate (PEM)\"\n\"{}\"\n\"{}\"\n",
            ROOT.trim(),
            HAMMER_ROOT.trim()
        );
        assert_eq!(parse_document(no_uses.as_bytes()).expect("parsed").len(), 2);
        // A PEM bundle.
        let bundle = format!("{ROOT}{HAMMER_ROOT}");
        assert_eq!(parse_document(bundle.as_bytes()).expect("parsed").len(), 2);
        // The stored form reads back as the same set, in order.
        let stored = to_pem(&parse_document(bundle.as_bytes()).expect("parsed"));
        assert!(stored.starts_with("# "), "{stored}");
        let back = parse_document(stored.as_bytes()).expect("parsed");
        let again = parse_document(bundle.as_bytes()).expect("parsed");
        assert!(back.ders().eq(again.ders()));
    }

    #[test]
    fn a_partial_or_garbled_document_gives_nothing() {
        let tls = "Server Authentication (TLS) 1.3.6.1.5.5.7.3.1";
        let whole = csv(&[(ROOT, tls), (HAMMER_ROOT, tls)]);
        for cut in [whole.len() - 30, whole.len() - 400, whole.len() / 2 + 7] {
            let e = parse_document(&whole.as_bytes()[..cut]).expect_err("a cut report");
            assert!(e.contains("CCADB CSV"), "cut at {cut}: {e}");
        }
        let bundle = format!("{ROOT}{HAMMER_ROOT}");
        let e = parse_document(&bundle.as_bytes()[..bundle.len() - 40]).expect_err("a cut bundle");
        assert!(e.contains("bad block"), "{e}");
        for garbled in [
            &b"<html>down for maintenance</html>"[..],
            b"",
            b"\"a\",\"b\"\n1,2\n",
        ] {
            assert!(parse_document(garbled).is_err());
        }
        // A report of no TLS root is refused (not read as "nothing new").
        let e = parse_document(csv(&[]).as_bytes()).expect_err("empty");
        assert!(e.contains("no root"), "{e}");
    }
}
