//! Read and verify the logs written by the Go reference implementation (Tessera
//! v1.0.4), and rebuild them byte for byte from their entries in several batchings.

use std::collections::HashMap;
use std::path::Path;

use tlogd_core::bundle::{append_entry, parse_bundle};
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::hash::{Hash, leaf_hash};
use tlogd_core::merkle::TileTree;
use tlogd_core::note::{NoteSigner, NoteVerifier};
use tlogd_core::proof;
use tlogd_core::tile::{TileId, parse_hash_tile};

const SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
const VKEY: &str = "example.com/log/testdata+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx";
const ORIGIN: &str = "example.com/log/testdata";

#[path = "support/vectors_dir.rs"]
mod vectors_dir;
use vectors_dir::vectors;

fn read(dir: &Path, rel: &str) -> Vec<u8> {
    std::fs::read(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Append `entries` in chunks of the given sizes, recording every file produced.
fn rebuild(
    entries: &[Vec<u8>],
    chunks: &mut dyn Iterator<Item = usize>,
) -> (TileTree, HashMap<String, Vec<u8>>) {
    let mut tree = TileTree::empty();
    let mut files = HashMap::new();
    let mut bundle: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < entries.len() {
        let n = chunks
            .next()
            .unwrap_or(usize::MAX)
            .max(1)
            .min(entries.len() - pos);
        let batch = &entries[pos..pos + n];
        let leaves: Vec<Hash> = batch.iter().map(|e| leaf_hash(e)).collect();
        tree.append(&leaves, &mut out);
        for (id, b) in out.drain(..) {
            files.insert(id.path(), b);
        }
        for (i, e) in batch.iter().enumerate() {
            append_entry(&mut bundle, e).unwrap();
            let size = (pos + i + 1) as u64;
            if size.is_multiple_of(256) {
                files.insert(
                    TileId::entries(size / 256 - 1, 256).path(),
                    std::mem::take(&mut bundle),
                );
            }
        }
        pos += n;
        if !pos.is_multiple_of(256) {
            files.insert(
                TileId::entries(pos as u64 / 256, (pos % 256) as u16).path(),
                bundle.clone(),
            );
        }
    }
    (tree, files)
}

#[test]
fn seventy_thousand_entries_verify_and_rebuild_byte_for_byte() {
    let dir = vectors().join("tessera-70k");
    let verifier = NoteVerifier::from_vkey(VKEY).unwrap();
    let (cp, _) = Checkpoint::open(&read(&dir, "checkpoint"), ORIGIN, &verifier).unwrap();
    assert_eq!(cp.size, 70_000);

    // Read: every bundle parses and holds `entry i`; every hash tile equals the one
    // recomputed from the bundles; the root matches the signed checkpoint.
    let mut entries = Vec::new();
    for n in 0..=273u64 {
        let id = TileId::entries(n, if n == 273 { 112 } else { 256 });
        let b = read(&dir, &id.path());
        for e in parse_bundle(&b).unwrap() {
            assert_eq!(e, format!("entry {}", entries.len()).as_bytes());
            entries.push(e.to_vec());
        }
    }
    assert_eq!(entries.len(), 70_000);
    let (tree, files) = rebuild(&entries, &mut std::iter::empty());
    assert_eq!(tree.root(), cp.root, "root of the Go log");
    let mut tiles: HashMap<TileId, Vec<Hash>> = HashMap::new();
    let mut listed = vec![
        "tile/0/273.p/112".to_string(),
        "tile/1/001.p/17".into(),
        "tile/2/000.p/1".into(),
        "tile/1/000".into(),
    ];
    listed.extend((0..273u64).map(|n| TileId::hash(0, n, 256).path()));
    listed.extend((0..273u64).map(|n| TileId::entries(n, 256).path()));
    listed.push("tile/entries/273.p/112".into());
    for rel in &listed {
        let got = read(&dir, rel);
        assert!(
            files.get(rel) == Some(&got),
            "{rel} differs from the recomputed one"
        );
        let id = TileId::parse(rel).unwrap();
        if matches!(id.kind, tlogd_core::tile::TileKind::Hash { .. }) {
            tiles.insert(id, parse_hash_tile(&got, id.width).unwrap());
        }
    }
    // The Go log's tiles prove inclusion of its entries.
    for i in [0u64, 1, 255, 256, 65535, 65536, 69_999] {
        let p = proof::inclusion_proof(i, cp.size, &tiles).unwrap();
        proof::verify_inclusion(&leaf_hash(&entries[i as usize]), i, cp.size, &p, &cp.root)
            .unwrap();
    }
    assert_eq!(proof::tree_root(cp.size, &tiles).unwrap(), cp.root);

    // Rebuild in several batchings: identical files and identical signed checkpoint.
    let signer = NoteSigner::from_skey(SKEY).unwrap();
    let patterns: Vec<(&str, Box<dyn Iterator<Item = usize>>)> = vec![
        ("one at a time", Box::new(std::iter::repeat(1))),
        ("7", Box::new(std::iter::repeat(7))),
        ("256", Box::new(std::iter::repeat(256))),
        ("1000", Box::new(std::iter::repeat(1000))),
        ("3000", Box::new(std::iter::repeat(3000))),
        (
            "mixed",
            Box::new([1usize, 300, 5, 4096, 17, 255, 256, 2].into_iter().cycle()),
        ),
    ];
    for (name, mut chunks) in patterns {
        let (tree, files) = rebuild(&entries, &mut chunks);
        for rel in &listed {
            assert!(
                files.get(rel).is_some_and(|f| *f == read(&dir, rel)),
                "{name}: {rel}"
            );
        }
        let mine = Checkpoint {
            origin: ORIGIN.into(),
            size: tree.size(),
            root: tree.root(),
            extensions: vec![],
        };
        assert_eq!(
            mine.sign(&signer).unwrap(),
            read(&dir, "checkpoint"),
            "{name}: checkpoint bytes"
        );
    }
}

#[test]
fn every_state_of_the_small_log_verifies_and_rebuilds() {
    let dir = vectors().join("tessera-testdata-log");
    let verifier = NoteVerifier::from_vkey(VKEY).unwrap();
    let signer = NoteSigner::from_skey(SKEY).unwrap();
    let words: Vec<Vec<u8>> =
        "one two three four five six seven eit nain ten ileven twelf threeten fourten fivten"
            .split(' ')
            .map(|w| w.as_bytes().to_vec())
            .collect();
    let mut tree = TileTree::empty();
    let mut out = Vec::new();
    let mut bundle = Vec::new();
    let mut prev: Option<Checkpoint> = None;
    for n in 0..=15usize {
        if n > 0 {
            tree.append(&[leaf_hash(&words[n - 1])], &mut out);
            append_entry(&mut bundle, &words[n - 1]).unwrap();
            let rel_tile = format!("tile/0/000.p/{n}");
            let (id, bytes) = out.drain(..).next_back().unwrap();
            assert_eq!(id.path(), rel_tile);
            assert_eq!(bytes, read(&dir, &rel_tile), "{rel_tile}");
            assert_eq!(
                bundle,
                read(&dir, &format!("tile/entries/000.p/{n}")),
                "bundle at {n}"
            );
            // The Go bundle parses back to the entries.
            let stored = read(&dir, &format!("tile/entries/000.p/{n}"));
            assert_eq!(
                parse_bundle(&stored).unwrap(),
                words[..n].iter().map(|w| w.as_slice()).collect::<Vec<_>>()
            );
        }
        let want = read(&dir, &format!("checkpoint.{n}"));
        let (cp, note) = Checkpoint::open(&want, ORIGIN, &verifier).unwrap();
        assert_eq!(note.signatures.len(), 1);
        assert_eq!(
            (cp.size, cp.root),
            (n as u64, tree.root()),
            "checkpoint.{n}"
        );
        let mine = Checkpoint {
            origin: ORIGIN.into(),
            size: tree.size(),
            root: tree.root(),
            extensions: vec![],
        };
        assert_eq!(mine.sign(&signer).unwrap(), want, "checkpoint.{n} bytes");
        // Consecutive checkpoints are consistent, proven from the Go log's own tiles.
        if let Some(p) = prev
            && p.size > 0
        {
            let mut tiles = HashMap::new();
            for id in proof::consistency_proof_tiles(p.size, cp.size).unwrap() {
                tiles.insert(
                    id,
                    parse_hash_tile(&read(&dir, &id.path()), id.width).unwrap(),
                );
            }
            let pr = proof::consistency_proof(p.size, cp.size, &tiles).unwrap();
            proof::verify_consistency(p.size, cp.size, &p.root, &cp.root, &pr).unwrap();
        }
        prev = Some(cp);
    }
    assert_eq!(read(&dir, "checkpoint"), read(&dir, "checkpoint.15"));
}

#[test]
fn a_tampered_checkpoint_does_not_open() {
    let dir = vectors().join("tessera-testdata-log");
    let verifier = NoteVerifier::from_vkey(VKEY).unwrap();
    let mut cp = read(&dir, "checkpoint");
    cp[ORIGIN.len() + 1] = b'9';
    assert!(Checkpoint::open(&cp, ORIGIN, &verifier).is_err());
    assert!(Checkpoint::open(&read(&dir, "checkpoint"), "example.com/other", &verifier).is_err());
}
