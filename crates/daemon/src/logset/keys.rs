//! A log's signing keys, read from its files or env `TLOGD_PRIVATE_KEY`: note signers
//! (Ed25519, ML-DSA-44) or a CT log's ECDSA P-256 key; a key file others can read is
//! warned about.

use std::sync::Arc;

use anyhow::{Context, bail};
use tlogd_core::keys::log_signer_from_skey;
use tlogd_core::mldsa::MAX_NAME_LEN;
use tlogd_core::note::{LogSigner, SignatureAlgorithm};

use crate::config::LogSection;

/// A secret file others on the machine can read is a key anyone there can sign with (or
/// a token anyone can write with): say so loudly at start-up. Not refused, as a file
/// shared with a group on purpose (a secrets volume) is legitimate.
pub(crate) fn warn_if_readable_by_others(path: &std::path::Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %path.display(),
            mode = format!("{:o}", m.permissions().mode() & 0o777),
            "{what} can be read by other users of this machine; chmod 600 it"
        );
    }
}

/// The texts of a log's signing keys, each with where it came from: one per file of
/// `private_key_file(s)`, in order, else one per non-empty line of env
/// `TLOGD_PRIVATE_KEY`; `missing` says how to make one.
pub(crate) fn read_key_texts(
    c: &LogSection,
    missing: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let files = c.key_files();
    if files.is_empty() {
        let env = std::env::var("TLOGD_PRIVATE_KEY").map_err(|_| anyhow::anyhow!("{missing}"))?;
        return Ok(env
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .enumerate()
            .map(|(i, l)| (format!("TLOGD_PRIVATE_KEY line {}", i + 1), l.to_string()))
            .collect());
    }
    files
        .iter()
        .map(|p| {
            warn_if_readable_by_others(p, "the signing key file");
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading private key file {}", p.display()))?;
            Ok((format!("private key file {}", p.display()), text))
        })
        .collect()
}

/// A log's checkpoint signers, in signing order, of the types their keys name
/// (Ed25519 or ML-DSA-44). Refused here, before the log opens: no key, a key twice,
/// and an ML-DSA-44 key for an origin longer than its signed message carries.
pub(crate) fn load_signers(
    c: &LogSection,
    origin: &str,
) -> anyhow::Result<Vec<Arc<dyn LogSigner>>> {
    let texts = read_key_texts(
        c,
        &format!(
            "no signing key: set `private_key_file` or `private_key_files` (or --private-key-file) or env TLOGD_PRIVATE_KEY; \
             `tlogd keygen --origin {origin}` makes one"
        ),
    )?;
    if texts.is_empty() {
        bail!("no signing key: TLOGD_PRIVATE_KEY is empty");
    }
    note_signers(texts, origin)
}

/// The note signers of key texts (see [`load_signers`]).
pub(crate) fn note_signers(
    texts: Vec<(String, String)>,
    origin: &str,
) -> anyhow::Result<Vec<Arc<dyn LogSigner>>> {
    let mut signers: Vec<Arc<dyn LogSigner>> = Vec::with_capacity(texts.len());
    for (source, text) in texts {
        let signer =
            log_signer_from_skey(text.trim()).with_context(|| format!("parsing the {source}"))?;
        if signer.algorithm() == SignatureAlgorithm::CosignatureMlDsa44
            && origin.len() > MAX_NAME_LEN
        {
            bail!(
                "{source}: an ML-DSA-44 key signs origins of at most {MAX_NAME_LEN} bytes (tlog-cosignature \"ML-DSA-44 signed message\"); `origin` is {} bytes",
                origin.len()
            );
        }
        if signers
            .iter()
            .any(|s| s.name() == signer.name() && s.key_id() == signer.key_id())
        {
            bail!(
                "{source}: the key {}+{:08x} is configured twice",
                signer.name(),
                signer.key_id()
            );
        }
        if signer.name() != origin {
            tracing::warn!(
                key_name = signer.name(),
                origin,
                "the signing key's name differs from the origin"
            );
        }
        signers.push(signer);
    }
    Ok(signers)
}

/// A CT log's ECDSA P-256 key: `private_key_file`, else env `TLOGD_PRIVATE_KEY`, PEM.
pub(crate) fn load_ct_key(l: &LogSection) -> anyhow::Result<tlogd_static_ct::signer::LogKey> {
    let missing = "no signing key: set `private_key_file` to a PEM ECDSA P-256 key; `tlogd keygen --ct` makes one";
    let text = match l.key_files().first() {
        Some(p) => {
            warn_if_readable_by_others(p, "the signing key file");
            std::fs::read_to_string(p)
                .with_context(|| format!("reading private key file {}", p.display()))?
        }
        None => std::env::var("TLOGD_PRIVATE_KEY").map_err(|_| anyhow::anyhow!("{missing}"))?,
    };
    tlogd_static_ct::signer::LogKey::from_pem(&text).context("parsing the CT log's private key")
}
