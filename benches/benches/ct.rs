//! Criterion benches of a CT add's CPU (benches/README.md, "Certificate Transparency"):
//! the signature libraries side by side (why aws-lc-rs checks leaves and signs SCTs,
//! over ring and RustCrypto, while RustCrypto signs tree heads), and a chain's whole
//! validation under each kind of issuer key, as `tlog-loadgen --ct --ct-issuer-key`
//! mints them.

use std::hint::black_box;
use std::sync::Arc;

use aws_lc_rs::signature as als;
use base64::Engine as _;
use criterion::{Criterion, criterion_group, criterion_main};
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use ring::signature::{self as rs, KeyPair as _};
use sha2::{Digest, Sha256, Sha384};
use tlog_loadgen::ct::{IssuerKey, Minter, load_root, mint_root};
use tlogd_ct::chain::{ChainKind, ChainPolicy, Roots, validate};
use tlogd_static_ct::LogKey;

const MESSAGE: &[u8] = &[0x5a; 200];

/// SCT signing: RFC 6979 through RustCrypto against randomized signatures in
/// aws-lc-rs (what `LogKey::sign_randomized` uses) and ring.
fn sct_signing(c: &mut Criterion) {
    let scalar = [7u8; 32];
    let key = LogKey::from_scalar(&scalar).expect("a valid scalar");
    let rng = ring::rand::SystemRandom::new();
    let point = p256::ecdsa::SigningKey::from_slice(&scalar)
        .expect("a valid scalar")
        .verifying_key()
        .to_encoded_point(false);
    let ring_key = rs::EcdsaKeyPair::from_private_key_and_public_key(
        &rs::ECDSA_P256_SHA256_ASN1_SIGNING,
        &scalar,
        point.as_bytes(),
        &rng,
    )
    .expect("ring takes the key");
    let mut g = c.benchmark_group("ct_sct_sign");
    g.bench_function("p256_rustcrypto_rfc6979", |b| {
        b.iter(|| key.sign(black_box(MESSAGE)))
    });
    g.bench_function("p256_aws_lc_randomized", |b| {
        b.iter(|| key.sign_randomized(black_box(MESSAGE)))
    });
    g.bench_function("p256_ring_randomized", |b| {
        b.iter(|| {
            ring_key
                .sign(&rng, black_box(MESSAGE))
                .expect("a signature")
        })
    });
    g.finish();
}

/// One leaf signature checked: RustCrypto (`p256`, `p384`, `rsa`) against ring and
/// aws-lc-rs (the key parsed for each check, and parsed once as `tlogd_ct::chain` keeps
/// it for a cached issuer).
fn leaf_verification(c: &mut Criterion) {
    let rng = ring::rand::SystemRandom::new();
    let mut g = c.benchmark_group("ct_verify");
    for (name, signing, verifying) in [
        (
            "p256_sha256",
            &rs::ECDSA_P256_SHA256_ASN1_SIGNING,
            &rs::ECDSA_P256_SHA256_ASN1,
        ),
        (
            "p384_sha384",
            &rs::ECDSA_P384_SHA384_ASN1_SIGNING,
            &rs::ECDSA_P384_SHA384_ASN1,
        ),
    ] {
        let pkcs8 = rs::EcdsaKeyPair::generate_pkcs8(signing, &rng).expect("a key");
        let pair = rs::EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).expect("a key");
        let sig = pair.sign(&rng, MESSAGE).expect("a signature");
        let point = pair.public_key().as_ref().to_vec();
        let der = sig.as_ref().to_vec();
        g.bench_function(format!("{name}_ring"), |b| {
            b.iter(|| {
                rs::UnparsedPublicKey::new(verifying, &point)
                    .verify(black_box(MESSAGE), &der)
                    .expect("verifies")
            })
        });
        let aws_alg = if name.starts_with("p256") {
            &als::ECDSA_P256_SHA256_ASN1
        } else {
            &als::ECDSA_P384_SHA384_ASN1
        };
        aws_lc_pair(&mut g, name, aws_alg, &point, &der);
        if name.starts_with("p256") {
            g.bench_function(format!("{name}_rustcrypto"), |b| {
                b.iter(|| {
                    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).expect("key");
                    let sig = p256::ecdsa::Signature::from_der(&der).expect("sig");
                    key.verify_prehash(&Sha256::digest(black_box(MESSAGE)), &sig)
                        .expect("verifies")
                })
            });
        } else {
            g.bench_function(format!("{name}_rustcrypto"), |b| {
                b.iter(|| {
                    let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(&point).expect("key");
                    let sig = p384::ecdsa::Signature::from_der(&der).expect("sig");
                    key.verify_prehash(&Sha384::digest(black_box(MESSAGE)), &sig)
                        .expect("verifies")
                })
            });
        }
    }
    // RSA-2048, PKCS#1 v1.5 with SHA-256: the test intermediate key of the loadgen.
    let pem = include_str!("../../crates/loadgen/src/ct-issuer-rsa-2048.pem");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let pkcs8 = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    let pair = rs::RsaKeyPair::from_pkcs8(&pkcs8).expect("an RSA key");
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(&rs::RSA_PKCS1_SHA256, &rng, MESSAGE, &mut sig)
        .expect("a signature");
    let public = pair.public_key().as_ref().to_vec();
    g.bench_function("rsa2048_sha256_ring", |b| {
        b.iter(|| {
            rs::UnparsedPublicKey::new(&rs::RSA_PKCS1_2048_8192_SHA256, &public)
                .verify(black_box(MESSAGE), &sig)
                .expect("verifies")
        })
    });
    aws_lc_pair(
        &mut g,
        "rsa2048_sha256",
        &als::RSA_PKCS1_2048_8192_SHA256,
        &public,
        &sig,
    );
    g.bench_function("rsa2048_sha256_rsa_crate", |b| {
        use rsa::pkcs1::DecodeRsaPublicKey as _;
        b.iter(|| {
            let key = rsa::RsaPublicKey::from_pkcs1_der(&public).expect("key");
            key.verify(
                rsa::Pkcs1v15Sign::new::<Sha256>(),
                &Sha256::digest(black_box(MESSAGE)),
                &sig,
            )
            .expect("verifies")
        })
    });
    g.finish();
}

/// aws-lc-rs's check of `sig` by `public` under `alg`: the key parsed for each check,
/// and parsed once.
fn aws_lc_pair(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    alg: &'static dyn als::VerificationAlgorithm,
    public: &[u8],
    sig: &[u8],
) {
    g.bench_function(format!("{name}_aws_lc"), |b| {
        b.iter(|| {
            als::UnparsedPublicKey::new(alg, public)
                .verify(black_box(MESSAGE), sig)
                .expect("verifies")
        })
    });
    let parsed = als::ParsedPublicKey::new(alg, public).expect("aws-lc-rs takes the key");
    g.bench_function(format!("{name}_aws_lc_parsed"), |b| {
        b.iter(|| {
            parsed
                .verify_sig(black_box(MESSAGE), sig)
                .expect("verifies")
        })
    });
}

/// A whole chain validated (leaf, minted intermediate, root), its CA link cached as
/// in a running log: parsing, policy and the leaf's signature.
fn chain_validation(c: &mut Criterion) {
    let root = mint_root("bench").expect("a root");
    let issuer = Arc::new(load_root(&root.cert_pem, &root.key_pem).expect("the root"));
    let (roots, _) = Roots::from_pem(root.cert_pem.as_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    let policy = ChainPolicy::default();
    let mut g = c.benchmark_group("ct_validate_chain");
    for (name, key) in [
        ("rsa2048", IssuerKey::Rsa2048),
        ("p256", IssuerKey::P256),
        ("p384", IssuerKey::P384),
    ] {
        let minter = Minter::new(issuer.clone(), 1, key).expect("an intermediate");
        let chain = vec![
            minter
                .leaf(1, tlog_loadgen::ct::ChainClass::Fresh)
                .expect("a leaf"),
            minter.intermediate().der().to_vec(),
            issuer.der().to_vec(),
        ];
        validate(&chain, ChainKind::Certificate, &roots, &policy, now).expect("valid");
        g.bench_function(name, |b| {
            b.iter(|| {
                validate(
                    black_box(&chain),
                    ChainKind::Certificate,
                    &roots,
                    &policy,
                    now,
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, sct_signing, leaf_verification, chain_validation);
criterion_main!(benches);
