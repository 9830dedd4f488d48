//! `[ct]`: a Certificate Transparency log (C2SP static-ct-api), its shard window and
//! log-list entry.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde::Deserialize;

/// `[ct]`: a Certificate Transparency log (C2SP static-ct-api). Submissions come to
/// `POST <log>/ct/v1/add-chain` and `add-pre-chain` (no `/add`), chains are validated
/// against the roots, and the checkpoint is signed with the RFC 6962 note signature of
/// the ECDSA P-256 key in `private_key_file`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtConfig {
    /// The accepted roots, a PEM file (served by `get-roots`). Blocks that do not
    /// parse are skipped with a warning; read again at every roots refresh and on
    /// SIGHUP, never dropping a root. This, `roots_url`, or both.
    pub roots_file: Option<PathBuf>,
    /// Where more roots come from, fetched at start-up, every
    /// `roots_refresh_interval_s` and on SIGHUP: a CCADB CSV report (the columns
    /// `X.509 Certificate (PEM)` and, when present, `Intended Use Case(s) Served`,
    /// whose rows must include TLS server authentication), as Sunlight and TesseraCT
    /// read them, or a PEM bundle. One URL or a list. Roots are merged into those in
    /// force and never dropped by a refresh; the set is kept in the log's storage, so
    /// a restart while a URL is down serves the last good set, and every frontend of
    /// a shared store serves the same roots.
    #[serde(default, deserialize_with = "one_or_many")]
    pub roots_url: Vec<String>,
    /// Seconds between two refreshes of the roots (`roots_url`, `roots_file`).
    #[serde(default = "default_roots_refresh_interval_s")]
    pub roots_refresh_interval_s: u64,
    /// How long one fetch of a `roots_url` may take, in ms, body included.
    #[serde(default = "default_roots_fetch_timeout_ms")]
    pub roots_fetch_timeout_ms: u64,
    /// Roots never accepted (hex SHA-256 of the certificate's DER, colons allowed):
    /// removed from the set in force and from what is stored, whatever the sources
    /// say. The only way a root leaves a log's set; every frontend of a shared store
    /// needs the same list.
    #[serde(default)]
    pub roots_reject_fingerprints: Vec<String>,
    /// Refuse certificates whose notAfter has passed.
    #[serde(default)]
    pub reject_expired: bool,
    /// Refuse certificates whose notAfter has not passed (a log for expired ones).
    #[serde(default)]
    pub reject_unexpired: bool,
    /// Temporal shard: refuse certificates expiring before this instant (RFC 3339,
    /// `2026-01-01T00:00:00Z`).
    pub not_after_start: Option<String>,
    /// Temporal shard: refuse certificates expiring at or after this instant.
    pub not_after_limit: Option<String>,
    /// Extended key usages (dotted OIDs) a certificate must have one of, as TesseraCT
    /// checks them: a certificate without the extension is refused, and
    /// anyExtendedKeyUsage counts only when listed (listing `2.5.29.37.0` turns the
    /// check off). Empty: any.
    #[serde(default)]
    pub allowed_ekus: Vec<String>,
    /// Extensions (dotted OIDs) a certificate must not carry.
    #[serde(default)]
    pub rejected_extensions: Vec<String>,
    /// Refuse precertificates issued by a precertificate signing certificate (RFC 6962
    /// §3.1), as Sunlight and Azul do; accepted by default, as TesseraCT does.
    #[serde(default)]
    pub reject_pre_issuers: bool,
    /// Answer an add only once a published checkpoint covers its entry (TesseraCT's
    /// publication awaiter): the SCT's entry is then visible to monitors when the CA
    /// gets it. Off: answered once the entry is durable in the committed tree, which
    /// static-ct-api allows and is a checkpoint interval sooner.
    #[serde(default)]
    pub await_publication: bool,
    /// Rate-limit submissions of old certificates (TesseraCT's
    /// `rate_limit_old_not_before`): those whose notBefore is more than this many days
    /// ago get at most `old_not_before_per_second` adds a second (one second's burst),
    /// beyond it `429` with `Retry-After`; re-logging an old CA's whole history cannot
    /// crowd out fresh issuance. 0: no limit.
    #[serde(default)]
    pub old_not_before_days: u64,
    /// See `old_not_before_days`.
    #[serde(default)]
    pub old_not_before_per_second: f64,
    /// Priority under load (#60): once this many CT adds are in progress (past their
    /// body, being validated or waiting for their entry's commit), the least urgent
    /// are answered `429` + `Retry-After` before any signature is checked:
    /// certificates that already carry SCTs (logged elsewhere, resubmitted by
    /// crawlers) and certificates issued more than `priority_old_days` ago; at twice
    /// this, final certificates too. Precertificates, which CAs need to issue, keep
    /// what is left, bounded only by the queue. 0 (the default): off. Set it around
    /// the adds in progress at the log's capacity (its add rate times its add
    /// latency); `tlogd_ct_priority_shed_total{class}` counts the refusals.
    #[serde(default)]
    pub priority_high_water: usize,
    /// See `priority_high_water`: a certificate whose notBefore is more than this many
    /// days ago is of the lowest priority.
    #[serde(default = "default_priority_old_days")]
    pub priority_old_days: u64,
    /// Rate-limit each issuing CA (#60; TesseraCT's users ask for it, its issue 585): at
    /// most this many new entries a second per issuer key (SHA-256 of the issuing CA's
    /// `SubjectPublicKeyInfo`, RFC 6962's `issuer_key_hash`), with a burst of
    /// `issuer_burst`; beyond it `429` + `Retry-After`. Counted once a chain has
    /// validated (a made-up chain cannot spend a real CA's share); resubmissions are
    /// answered before and never count. One CA's mass re-logging cannot take the log
    /// from the others. 0 (the default): no limit.
    #[serde(default)]
    pub issuer_per_second: f64,
    /// See `issuer_per_second`: the adds an issuer may send at once (default: one
    /// second's worth, at least 1).
    pub issuer_burst: Option<f64>,
    /// Threads that validate the chains too costly to check on a request's own thread
    /// (P-384 and P-521 links, RSA keys aws-lc-rs does not take; cheap ones never
    /// wait for these). Default: one per core.
    pub validation_threads: Option<usize>,
    /// Chains waiting for those threads at most; beyond it an add gets `503` +
    /// `Retry-After` at once.
    #[serde(default = "default_validation_queue")]
    pub validation_queue: usize,
    /// Chains from one client address (IPv6: its `http.ipv6_prefix_len` prefix;
    /// trusted proxies are not counted) waiting or being validated at most: one
    /// address cannot take the queue from the others.
    #[serde(default = "default_validation_queue_per_address")]
    pub validation_queue_per_address: usize,
    /// Freeze the shard for good (the engine's freeze: adds get `403`, reads go on,
    /// a final checkpoint is published) once `not_after_limit` plus `freeze_grace_s`
    /// has passed: at start-up if it already has, else when the instant comes. No
    /// unexpired certificate can fall in the window any more. Without
    /// `not_after_limit`, nothing to do.
    #[serde(default = "default_true")]
    pub freeze_after_window: bool,
    /// Seconds after `not_after_limit` before the shard is frozen (Sunlight's
    /// read-only delay: one week), for late submissions and clock skew.
    #[serde(default = "default_freeze_grace_s")]
    pub freeze_grace_s: u64,
    /// `log.v3.json`: where CAs submit, with its trailing slash (default
    /// `https://<origin>/`).
    pub submission_url: Option<String>,
    /// `log.v3.json`: where monitors read (default: `submission_url`).
    pub monitoring_url: Option<String>,
    /// `log.v3.json`: the log's description (default: the origin).
    pub description: Option<String>,
    /// `log.v3.json`: a short name (default: the `[[logs]]` name, else the origin).
    pub friendly_name: Option<String>,
    /// `log.v3.json`: the maximum merge delay promised, in seconds (`mmd` and
    /// `mmd_seconds`; a static-ct-api log merges within a checkpoint interval).
    #[serde(default = "default_mmd_seconds")]
    pub mmd_seconds: u64,
    /// `log.v3.json`: `"production"` or `"test"`; unset: left out (as Sunlight does
    /// for a log of custom roots).
    pub intended_use: Option<String>,
}

/// One string or a list of them.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

fn default_roots_refresh_interval_s() -> u64 {
    3600
}

fn default_roots_fetch_timeout_ms() -> u64 {
    30_000
}

/// A root's SHA-256 fingerprint as `ct.roots_reject_fingerprints` gives it: 64 hex
/// digits, upper or lower case, colons or spaces between bytes allowed.
pub fn parse_fingerprint(text: &str) -> anyhow::Result<[u8; 32]> {
    let digits: String = text.chars().filter(|c| !matches!(c, ':' | ' ')).collect();
    let mut out = [0u8; 32];
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{text:?} is not a SHA-256 fingerprint (64 hex digits)");
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16)
            .with_context(|| format!("{text:?} is not a SHA-256 fingerprint"))?;
    }
    Ok(out)
}

fn default_priority_old_days() -> u64 {
    7
}

fn default_true() -> bool {
    true
}

fn default_freeze_grace_s() -> u64 {
    7 * 86_400
}

fn default_mmd_seconds() -> u64 {
    60
}

/// A `log.v3.json` URL setting (`ct.submission_url`, `ct.monitoring_url`): http(s),
/// with a host, no query, fragment or whitespace; returned with a trailing slash.
pub fn log_list_url(key: &str, url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| {
        let host = r.split('/').next().unwrap_or("");
        !host.is_empty()
            && !r.contains(['?', '#'])
            && !r.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    if !ok {
        bail!(
            "`{key}` = {url:?} is not an http:// or https:// URL with a host (and no query or fragment), like \"https://ct.example.com/2026h1/\""
        );
    }
    Ok(match url.ends_with('/') {
        true => url.to_string(),
        false => format!("{url}/"),
    })
}

impl CtConfig {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if self.roots_file.is_none() && self.roots_url.is_empty() {
            bail!(
                "[ct] needs its roots: `roots_file` (a PEM file), `roots_url` (a CCADB report or a PEM bundle), or both"
            );
        }
        for url in &self.roots_url {
            let host = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"))
                .and_then(|r| r.split('/').next())
                .unwrap_or_default();
            if host.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!("`ct.roots_url` {url:?} is not an http:// or https:// URL with a host");
            }
        }
        if self.priority_high_water > 0 && self.priority_old_days == 0 {
            bail!(
                "`ct.priority_old_days` must be at least 1 (0 would rank every final certificate least urgent)"
            );
        }
        if self.roots_refresh_interval_s == 0 {
            bail!("`ct.roots_refresh_interval_s` must be at least 1");
        }
        if self.roots_fetch_timeout_ms == 0 {
            bail!("`ct.roots_fetch_timeout_ms` must be at least 1");
        }
        for f in &self.roots_reject_fingerprints {
            parse_fingerprint(f).context("`ct.roots_reject_fingerprints`")?;
        }
        let start = self
            .not_after_start
            .as_deref()
            .map(|s| parse_rfc3339_ms(s).with_context(|| "`ct.not_after_start`"))
            .transpose()?;
        let limit = self
            .not_after_limit
            .as_deref()
            .map(|s| parse_rfc3339_ms(s).with_context(|| "`ct.not_after_limit`"))
            .transpose()?;
        if let (Some(a), Some(b)) = (start, limit)
            && a >= b
        {
            bail!("`ct.not_after_start` must be before `ct.not_after_limit`");
        }
        if self.old_not_before_days > 0
            && !(self.old_not_before_per_second.is_finite() && self.old_not_before_per_second > 0.0)
        {
            bail!("`ct.old_not_before_days` needs `ct.old_not_before_per_second` above 0");
        }
        if !(self.issuer_per_second.is_finite() && self.issuer_per_second >= 0.0) {
            bail!("`ct.issuer_per_second` must be a number of adds a second, 0 for no limit");
        }
        if let Some(b) = self.issuer_burst
            && !(b.is_finite() && b >= 1.0)
        {
            bail!("`ct.issuer_burst` must be at least 1");
        }
        if self.issuer_burst.is_some() && self.issuer_per_second == 0.0 {
            bail!("`ct.issuer_burst` needs `ct.issuer_per_second` above 0");
        }
        if self.reject_expired && self.reject_unexpired {
            bail!("`ct.reject_expired` and `ct.reject_unexpired` together refuse everything");
        }
        for oid in self.allowed_ekus.iter().chain(&self.rejected_extensions) {
            let ok = oid.split('.').count() >= 2
                && oid
                    .split('.')
                    .all(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                bail!(
                    "`{oid}` in `ct.allowed_ekus` or `ct.rejected_extensions` is not a dotted OID"
                );
            }
        }
        for (key, url) in [
            ("ct.submission_url", &self.submission_url),
            ("ct.monitoring_url", &self.monitoring_url),
        ] {
            if let Some(u) = url {
                log_list_url(key, u)?;
            }
        }
        for (key, v) in [
            ("ct.description", &self.description),
            ("ct.friendly_name", &self.friendly_name),
        ] {
            if let Some(v) = v
                && (v.trim().is_empty() || v.chars().any(char::is_control))
            {
                bail!("`{key}` = {v:?}: empty or with control characters");
            }
        }
        if self.mmd_seconds == 0 {
            bail!("`ct.mmd_seconds` must be at least 1 (the merge delay promised in log.v3.json)");
        }
        if let Some(u) = self.intended_use.as_deref()
            && !matches!(u, "production" | "test")
        {
            bail!("`ct.intended_use` = {u:?}: \"production\" or \"test\" (or unset)");
        }
        Ok(())
    }

    /// When the shard freezes (`not_after_limit` plus `freeze_grace_s`), in
    /// milliseconds since the Unix epoch; `None` without a limit or with
    /// `freeze_after_window = false`.
    pub fn freeze_at_ms(&self) -> anyhow::Result<Option<u64>> {
        let (_, limit) = self.shard_window()?;
        Ok(limit
            .filter(|_| self.freeze_after_window)
            .map(|l| l.saturating_add(self.freeze_grace_s.saturating_mul(1000))))
    }

    /// `not_after_start` and `not_after_limit`, in milliseconds since the Unix epoch.
    pub fn shard_window(&self) -> anyhow::Result<(Option<u64>, Option<u64>)> {
        let ms = |s: &Option<String>| s.as_deref().map(parse_rfc3339_ms).transpose();
        Ok((ms(&self.not_after_start)?, ms(&self.not_after_limit)?))
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` (RFC 3339 in UTC) in milliseconds since the Unix epoch.
pub fn parse_rfc3339_ms(s: &str) -> anyhow::Result<u64> {
    let bad = || anyhow::anyhow!("{s:?} is not an RFC 3339 UTC time like 2026-01-01T00:00:00Z");
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' || !matches!(b[b.len() - 1], b'Z' | b'z') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> anyhow::Result<u64> {
        let t = s.get(r).ok_or_else(bad)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse().map_err(|_| bad())
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let frac = &s[19..s.len() - 1];
    let millis = match frac {
        "" => 0,
        f if f.starts_with('.') && f.len() > 1 => {
            let digits = &f[1..];
            if !digits.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let mut padded: String = digits.chars().take(3).collect();
            while padded.len() < 3 {
                padded.push('0');
            }
            padded.parse::<u64>().map_err(|_| bad())?
        }
        _ => return Err(bad()),
    };
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&mo) || h > 23 || mi > 59 || sec > 59 {
        return Err(bad());
    }
    if d == 0 || d > u64::from(tlogd_core::time::days_in_month(y as i64, mo as u32)) {
        return Err(bad());
    }
    // From 1970 on (checked above): not negative.
    let days = tlogd_core::time::days_from_civil(y as i64, mo as u32, d as u32) as u64;
    Ok(((days * 24 + h) * 60 + mi) * 60_000 + sec * 1000 + millis)
}

fn default_validation_queue() -> usize {
    64
}

fn default_validation_queue_per_address() -> usize {
    8
}
