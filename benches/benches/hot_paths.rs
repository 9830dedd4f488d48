//! Criterion benches of tlogd's hot paths (results in benches/README.md).

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tlogd_core::bundle::append_entry;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::hash::{Hash, leaf_hash};
use tlogd_core::merkle::TileTree;
use tlogd_core::note::NoteSigner;
use tlogd_core::proof;
use tlogd_core::tile::{TILE_WIDTH, TileId, TileKind, edge_tiles, parse_hash_tile};

const SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";

fn pseudo_hash(i: u64) -> Hash {
    leaf_hash(&i.to_be_bytes())
}

/// A tree of `size` built cheaply from random-looking edge tiles.
fn tree_at(size: u64) -> TileTree {
    let mut edge: Vec<Vec<Hash>> = Vec::new();
    for id in edge_tiles(size) {
        if let TileKind::Hash { level } = id.kind {
            let l = level as usize;
            if edge.len() <= l {
                edge.resize(l + 1, Vec::new());
            }
            edge[l] = (0..id.width as u64)
                .map(|i| pseudo_hash(i + 1000 * l as u64))
                .collect();
        }
    }
    TileTree::from_edge(size, edge).expect("valid edge")
}

fn hashing(c: &mut Criterion) {
    let entry = vec![7u8; 128];
    let mut g = c.benchmark_group("leaf_hash");
    g.throughput(Throughput::Elements(1));
    g.bench_function("128B entry", |b| b.iter(|| leaf_hash(black_box(&entry))));
    g.finish();
}

fn integration(c: &mut Criterion) {
    let leaves: Vec<Hash> = (0..256).map(pseudo_hash).collect();
    let mut g = c.benchmark_group("integrate_256_leaves");
    g.throughput(Throughput::Elements(256));
    for size in [0u64, 1 << 20, 1 << 30, (1 << 40) + 12345] {
        let tree = tree_at(size);
        g.bench_function(format!("tree size {size}"), |b| {
            b.iter_batched_ref(
                || (tree.clone(), Vec::with_capacity(16)),
                |(t, out)| {
                    t.append(&leaves, out);
                    black_box(t.root())
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn proofs(c: &mut Criterion) {
    let size = 70_000u64;
    let leaves: Vec<Hash> = (0..size).map(pseudo_hash).collect();
    let mut t = TileTree::empty();
    let mut out = Vec::new();
    t.append(&leaves, &mut out);
    let root = t.root();
    let mut tiles: HashMap<TileId, Vec<Hash>> = HashMap::new();
    for (id, b) in out {
        tiles.insert(id, parse_hash_tile(&b, id.width).expect("tile"));
    }
    let mut g = c.benchmark_group("proofs");
    let index = 12_345u64;
    g.bench_function("inclusion build (70k)", |b| {
        b.iter(|| proof::inclusion_proof(black_box(index), size, &tiles).expect("proof"))
    });
    let p = proof::inclusion_proof(index, size, &tiles).expect("proof");
    g.bench_function("inclusion verify (70k)", |b| {
        b.iter(|| {
            proof::verify_inclusion(&leaves[index as usize], index, size, black_box(&p), &root)
        })
    });
    let mut old_tree = TileTree::empty();
    old_tree.append(&leaves[..40_000], &mut Vec::new());
    let old_root = old_tree.root();
    g.bench_function("consistency build (40k->70k)", |b| {
        b.iter(|| proof::consistency_proof(black_box(40_000), size, &tiles).expect("proof"))
    });
    let cp = proof::consistency_proof(40_000, size, &tiles).expect("proof");
    g.bench_function("consistency verify (40k->70k)", |b| {
        b.iter(|| proof::verify_consistency(40_000, size, &old_root, &root, black_box(&cp)))
    });
    g.finish();
}

fn notes(c: &mut Criterion) {
    let signer = NoteSigner::from_skey(SKEY).expect("key");
    let verifier = signer.verifier();
    let cp = Checkpoint {
        origin: "example.com/log/testdata".into(),
        size: 123_456_789,
        root: pseudo_hash(1),
        extensions: vec![],
    };
    let signed = cp.sign(&signer).expect("sign");
    let mut g = c.benchmark_group("checkpoint");
    g.bench_function("sign", |b| b.iter(|| cp.sign(black_box(&signer))));
    g.bench_function("open (parse + verify)", |b| {
        b.iter(|| Checkpoint::open(black_box(&signed), "example.com/log/testdata", &verifier))
    });
    g.finish();
}

fn bundles(c: &mut Criterion) {
    let entries: Vec<Vec<u8>> = (0..TILE_WIDTH)
        .map(|i| format!("entry {i} {}", "x".repeat(100)).into_bytes())
        .collect();
    let mut g = c.benchmark_group("bundle");
    g.throughput(Throughput::Elements(TILE_WIDTH));
    g.bench_function("encode 256 entries", |b| {
        let mut buf = Vec::with_capacity(64 << 10);
        b.iter(|| {
            buf.clear();
            for e in &entries {
                append_entry(&mut buf, e).expect("entry");
            }
            black_box(buf.len())
        })
    });
    g.finish();
}

criterion_group!(benches, hashing, integration, proofs, notes, bundles);
criterion_main!(benches);
