//! Writes the seed corpus of every target into `fuzz/corpus/<target>/` (run from the
//! repository root: `cargo run --release -p tlogd-fuzz --bin fuzz-seeds`). The seeds
//! are small, well-formed inputs of each format, so the fuzzer starts from deep paths;
//! they are committed, and regenerating them gives the same bytes.

use std::path::Path;

use tlogd_core::bundle::append_entry;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::cosignature::CosignatureSigner;
use tlogd_core::hash::Hash;
use tlogd_core::note::{NoteSigner, key_id};
use tlogd_core::witness::add_checkpoint_body;
use tlogd_fuzz::{LOG_SKEY, ORIGIN, sample_log};

fn write(target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = Path::new("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(name), bytes)
}

fn main() -> std::io::Result<()> {
    if !Path::new("fuzz/Cargo.toml").exists() {
        eprintln!("run from the repository root");
        std::process::exit(2);
    }
    // tile: the first byte selects path (0), hash tile (1), bundle (2), prefix (3).
    for (i, p) in [
        "tile/0/000",
        "tile/0/x001/x234/067.p/8",
        "tile/entries/000.p/1",
        "tile/63/x999/999.p/255",
    ]
    .iter()
    .enumerate()
    {
        write("tile", &format!("path{i}"), &[b"\0", p.as_bytes()].concat())?;
    }
    let mut hashes = vec![1u8, 0, 2];
    hashes.extend((0..64).map(|i| i as u8));
    write("tile", "hash", &hashes)?;
    let mut bundle = Vec::new();
    for e in [&b"a"[..], b"bcd", b"entry 2"] {
        append_entry(&mut bundle, e).map_err(std::io::Error::other)?;
    }
    write("tile", "bundle", &[&[2u8][..], &bundle].concat())?;
    write(
        "tile",
        "prefix",
        &[&[3u8, 0, 0, 3, 0, 2][..], &bundle].concat(),
    )?;

    // note: signed checkpoints (with an extension line and a cosignature), a bare note
    // text, an origin.
    let signer = NoteSigner::from_skey(LOG_SKEY).map_err(std::io::Error::other)?;
    let cp = Checkpoint {
        origin: ORIGIN.into(),
        size: 15,
        root: [7; 32],
        extensions: vec!["ext line".into()],
    };
    let signed = cp.sign(&signer).map_err(std::io::Error::other)?;
    write("note", "checkpoint", &signed)?;
    let cosigner = fixed_cosigner()?;
    let mut note = tlogd_core::note::Note::parse(&signed).map_err(std::io::Error::other)?;
    note.signatures
        .push(cosigner.cosign(&note.text, 1_700_000_000));
    write("note", "cosigned", &note.to_bytes())?;
    write("note", "text", cp.to_text().as_bytes())?;
    write("note", "origin", b"example.com/log")?;

    // keys: log and cosigner keys, private and public.
    write("keys", "skey", LOG_SKEY.as_bytes())?;
    write("keys", "vkey", signer.verifier().to_vkey().as_bytes())?;
    write(
        "keys",
        "cosigner-vkey",
        cosigner.verifier().to_vkey().as_bytes(),
    )?;

    // witness: a policy, an add-checkpoint body, a 409 body.
    let w = cosigner.verifier().to_vkey();
    let policy = format!(
        "# quorum of one group\nlog {}\nwitness W1 {w} http://127.0.0.1:1\ngroup G any W1\nquorum G\n",
        signer.verifier().to_vkey()
    );
    write("witness", "policy", policy.as_bytes())?;
    let proof: Vec<Hash> = vec![[1; 32], [2; 32]];
    write(
        "witness",
        "add-checkpoint",
        &add_checkpoint_body(3, &proof, &signed),
    )?;
    write("witness", "size", b"12\n")?;

    // config: the shipped example files.
    for name in ["posix", "mysql", "postgres"] {
        let text = std::fs::read(format!("config/{name}.toml"))?;
        write("config", name, &text)?;
    }

    // verify_log: small whole logs, with earlier checkpoints.
    write("verify_log", "size5", &sample_log(&[5]))?;
    write("verify_log", "sizes3-7", &sample_log(&[3, 7]))?;
    write("verify_log", "size257", &sample_log(&[200, 257]))?;
    write("verify_log", "empty", &sample_log(&[0]))?;
    Ok(())
}

/// The targets' cosigner key (seed 7...7), as a private key string.
fn fixed_cosigner() -> std::io::Result<CosignatureSigner> {
    use base64::Engine as _;
    let seed = [7u8; 32];
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let name = "witness.example/w1";
    let mut typed = vec![0x04];
    typed.extend_from_slice(public.as_bytes());
    let id = key_id(name, &typed);
    let mut private = vec![0x04];
    private.extend_from_slice(&seed);
    let skey = format!(
        "PRIVATE+KEY+{name}+{id:08x}+{}",
        base64::engine::general_purpose::STANDARD.encode(private)
    );
    CosignatureSigner::from_skey(&skey).map_err(std::io::Error::other)
}
