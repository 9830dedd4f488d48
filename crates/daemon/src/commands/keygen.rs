//! `tlogd keygen`: a fresh signing key, written with mode 0600 (never over an existing
//! file), its verifier key printed: Ed25519 or ML-DSA-44 note keys for a tlog-tiles
//! log, an ECDSA P-256 key for a Certificate Transparency log.

use std::path::PathBuf;

use anyhow::{Context, bail};
use tlogd_core::mldsa::{MAX_NAME_LEN, generate_mldsa44_key};
use tlogd_core::note::generate_key;

/// `tlogd keygen`: a key of `algorithm` named `origin` (with `ct`, a CT log's ECDSA
/// P-256 key), written to `out`; its public side printed.
pub fn run(origin: &str, algorithm: KeyAlgorithm, ct: bool, out: &PathBuf) -> anyhow::Result<()> {
    match ct {
        true => keygen_ct(origin, out),
        false => keygen_note(origin, algorithm, out),
    }
}

/// The algorithm of a key `tlogd keygen` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyAlgorithm {
    /// Ed25519 note signatures (signed-note type 0x01).
    Ed25519,
    /// Timestamped ML-DSA-44 cosignatures (signed-note type 0x06, tlog-cosignature).
    #[value(name = "ml-dsa-44")]
    MlDsa44,
    /// ECDSA P-256, a Certificate Transparency log's key (RFC 6962 signatures; the same
    /// as --ct).
    #[value(name = "ecdsa-p256")]
    EcdsaP256,
}

/// Write a fresh private key file (mode 0600, never over an existing file).
fn write_key_file(out: &PathBuf, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("creating {} (it must not exist yet)", out.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    f.sync_all()?;
    eprintln!("private key written to {}", out.display());
    Ok(())
}

fn keygen_ct(origin: &str, out: &PathBuf) -> anyhow::Result<()> {
    use base64::Engine as _;
    // A scalar outside 1..n (probability ~2^-32) is drawn again.
    let key = loop {
        let mut d = [0u8; 32];
        getrandom::fill(&mut d).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        if let Ok(k) = tlogd_static_ct::signer::LogKey::from_scalar(&d) {
            break k;
        }
    };
    write_key_file(out, &key.to_pkcs8_pem()?)?;
    print!("{}", key.public_key_pem()?);
    println!(
        "log ID: {}",
        base64::engine::general_purpose::STANDARD.encode(key.log_id())
    );
    let signer = tlogd_ct::Rfc6962Signer::new(origin, key);
    println!(
        "vkey: {}",
        tlogd_core::note::LogSigner::verifier(&signer).to_vkey()
    );
    Ok(())
}

fn keygen_note(origin: &str, algorithm: KeyAlgorithm, out: &PathBuf) -> anyhow::Result<()> {
    let (skey, vkey) = match algorithm {
        KeyAlgorithm::Ed25519 => generate_key(origin),
        KeyAlgorithm::EcdsaP256 => return keygen_ct(origin, out),
        KeyAlgorithm::MlDsa44 => {
            if origin.len() > MAX_NAME_LEN {
                bail!(
                    "an ML-DSA-44 key's name (the origin) is at most {MAX_NAME_LEN} bytes (tlog-cosignature); this one is {}",
                    origin.len()
                );
            }
            generate_mldsa44_key(origin)
        }
    }
    .context("generating key")?;
    write_key_file(out, &format!("{skey}\n"))?;
    println!("{vkey}");
    Ok(())
}
