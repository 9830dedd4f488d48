//! Chain validation against TesseraCT's and Azul's vectors (outcomes as the vectors'
//! README states them) and tlogd's own chains (`testdata/chains/tlogd/gen.sh`).

use super::signature::*;
use super::*;
use x509_parser::certificate::TbsCertificate;

/// The chains' directory, read at run time: the binary may come from a build in another
/// clone (a shared target directory).
fn dir() -> String {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    format!("{manifest}/testdata/chains/")
}

use ChainKind::{Certificate as Cert_, Precertificate as Pre};

fn read(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}{name}", dir())).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The certificates of a PEM file, in order.
fn certs(name: &str) -> Vec<Vec<u8>> {
    pem_blocks(&read(name))
        .into_iter()
        .map(|b| match b {
            PemBlock::Block { label, body } if label == "CERTIFICATE" => body.unwrap(),
            _ => panic!("{name}: not only certificates"),
        })
        .collect()
}

fn cert(name: &str) -> Vec<u8> {
    let mut c = certs(name);
    assert_eq!(c.len(), 1, "{name}");
    c.remove(0)
}

fn chain(names: &[&str]) -> Vec<Vec<u8>> {
    names.iter().flat_map(|n| certs(n)).collect()
}

fn roots(names: &[&str]) -> Roots {
    let mut pem = Vec::new();
    for n in names {
        pem.extend(read(n));
        pem.push(b'\n');
    }
    let (roots, warnings) = Roots::from_pem(&pem);
    assert!(warnings.is_empty(), "{warnings:?}");
    roots
}

/// Milliseconds since the epoch at midnight UTC of a date.
fn day(y: i64, m: u32, d: u32) -> u64 {
    (tlogd_core::time::days_from_civil(y, m, d) * 86_400_000) as u64
}

/// 2026-01-01: after most vector leaves expired (validation ignores it by default).
fn now() -> u64 {
    day(2026, 1, 1)
}

fn ok(chain: &[Vec<u8>], kind: ChainKind, roots: &Roots) -> ValidatedChain {
    validate(chain, kind, roots, &ChainPolicy::default(), now())
        .unwrap_or_else(|e| panic!("refused: {e}"))
}

fn err(chain: &[Vec<u8>], kind: ChainKind, roots: &Roots) -> ChainError {
    match validate(chain, kind, roots, &ChainPolicy::default(), now()) {
        Ok(v) => panic!("accepted with {} issuers", v.issuers.len()),
        Err(e) => e,
    }
}

fn with_policy(
    chain: &[Vec<u8>],
    kind: ChainKind,
    roots: &Roots,
    p: &ChainPolicy,
) -> Result<(), ChainError> {
    validate(chain, kind, roots, p, now()).map(|_| ())
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

fn spki_hash(der: &[u8]) -> [u8; 32] {
    sha(Cert::parse(der).unwrap().spki)
}

/// The issuers are these, and the submission's fingerprints are theirs.
fn assert_issuers(v: &ValidatedChain, want: &[&[u8]]) {
    let got: Vec<&[u8]> = v.issuers.iter().map(Vec::as_slice).collect();
    assert_eq!(got, want);
    let fps: Vec<[u8; 32]> = want.iter().map(|d| sha(d)).collect();
    assert_eq!(v.submission.chain, fps);
}

fn precert_parts(v: &ValidatedChain) -> ([u8; 32], &[u8], &[u8]) {
    match &v.submission.entry {
        SubmittedEntry::Precertificate {
            issuer_key_hash,
            tbs_certificate,
            pre_certificate,
        } => (*issuer_key_hash, tbs_certificate, pre_certificate),
        SubmittedEntry::Certificate { .. } => panic!("not a precertificate entry"),
    }
}

/// `tbs` is `precert`'s TBS with only the poison removed: every field but the
/// extensions byte for byte, and the extensions but the poison byte for byte, in order
/// (and x509-parser reads the result).
fn assert_poison_removed(precert: &[u8], tbs: &[u8]) {
    let orig = Cert::parse(precert).unwrap();
    let (rest, parsed) = TbsCertificate::from_der(tbs).unwrap();
    assert!(rest.is_empty());
    assert!(
        parsed
            .extensions()
            .iter()
            .all(|e| e.oid.as_bytes() != OID_CT_POISON)
    );
    let fields = Reader::new(der::read_exact(tbs, der::SEQUENCE).unwrap().value)
        .all()
        .unwrap();
    assert_eq!(fields.len(), orig.tbs_fields.len());
    for (got, want) in fields.iter().zip(&orig.tbs_fields) {
        if want.tag == der::CONTEXT_3 {
            let got_exts = parse_extensions(got.value).unwrap();
            let got_raw: Vec<&[u8]> = got_exts.iter().map(|e| e.raw).collect();
            let want_raw: Vec<&[u8]> = orig
                .extensions
                .iter()
                .filter(|e| e.oid != OID_CT_POISON)
                .map(|e| e.raw)
                .collect();
            assert_eq!(got_raw, want_raw);
        } else {
            assert_eq!(got.raw, want.raw);
        }
    }
}

// ---------------------------------------------------------------------------------------
// TesseraCT internal/testdata: roots = test_root_ca_cert.pem.

const T_ROOT: &str = "tesseract/test_root_ca_cert.pem";
const T_INT: &str = "tesseract/test_intermediate_ca_cert.pem";
const T_PRE_INT: &str = "tesseract/test_pre_intermediate_ca_cert.pem";

#[test]
fn tesseract_certificate_signed_by_root_gets_the_root_appended() {
    let roots = roots(&[T_ROOT]);
    let root = cert(T_ROOT);
    let leaf = chain(&["tesseract/test_leaf_cert_signed_by_root.pem"]);
    let v = ok(&leaf, Cert_, &roots);
    assert_eq!(
        v.submission.entry,
        SubmittedEntry::Certificate {
            der: leaf[0].clone()
        }
    );
    assert_issuers(&v, &[&root]);
    // The submitter may include the root: the same issuers.
    let with_root = [leaf, vec![root.clone()]].concat();
    assert_issuers(&ok(&with_root, Cert_, &roots), &[&root]);
}

#[test]
fn tesseract_certificates_signed_by_intermediates() {
    let roots = roots(&[T_ROOT]);
    let root = cert(T_ROOT);
    for (leaf, int) in [
        ("tesseract/test_leaf_cert_signed_by_intermediate.pem", T_INT),
        (
            "tesseract/test_leaf_cert_signed_by_pre_intermediate.pem",
            T_PRE_INT,
        ),
    ] {
        let c = chain(&[leaf, int]);
        assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &root]);
        let c = chain(&[leaf, int, T_ROOT]);
        assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &root]);
        // Without its intermediate the leaf does not reach the root.
        assert!(matches!(
            err(&chain(&[leaf]), Cert_, &roots),
            ChainError::NoRoot { index: 0, .. }
        ));
    }
}

#[test]
fn tesseract_precertificates() {
    let roots = roots(&[T_ROOT]);
    let root = cert(T_ROOT);
    // Signed by the root: the root's key is the issuer key.
    let c = chain(&["tesseract/test_leaf_pre_cert_signed_by_root.pem"]);
    let v = ok(&c, Pre, &roots);
    assert_issuers(&v, &[&root]);
    let (ikh, tbs, pre) = precert_parts(&v);
    assert_eq!((ikh, pre), (spki_hash(&root), c[0].as_slice()));
    assert_poison_removed(&c[0], tbs);

    // Signed by the intermediate, and by the "pre-intermediate": TesseraCT's generator
    // put the Certificate Transparency OID there as an extension of its own, not in
    // extKeyUsage, so (as TesseraCT decides) it is an ordinary intermediate: its key is
    // the issuer key and the TBS keeps its issuer.
    for (leaf, int) in [
        (
            "tesseract/test_leaf_pre_cert_signed_by_intermediate.pem",
            T_INT,
        ),
        (
            "tesseract/test_leaf_pre_cert_signed_by_pre_intermediate.pem",
            T_PRE_INT,
        ),
    ] {
        let c = chain(&[leaf, int]);
        let v = ok(&c, Pre, &roots);
        assert_issuers(&v, &[&c[1], &root]);
        let (ikh, tbs, _) = precert_parts(&v);
        assert_eq!(ikh, spki_hash(&c[1]));
        assert_poison_removed(&c[0], tbs);
        let c = chain(&[leaf, int, T_ROOT]);
        assert_issuers(&ok(&c, Pre, &roots), &[&c[1], &root]);
    }
    assert!(!Cert::parse(&cert(T_PRE_INT)).unwrap().is_pre_issuer());
}

#[test]
fn tesseract_precerts_only_to_add_pre_chain_certs_only_to_add_chain() {
    let roots = roots(&[T_ROOT]);
    for name in [
        "tesseract/test_leaf_pre_cert_signed_by_root.pem",
        "tesseract/test_leaf_pre_cert_signed_by_intermediate.pem",
    ] {
        let mut c = chain(&[name]);
        if name.contains("intermediate") {
            c.push(cert(T_INT));
        }
        let e = err(&c, Cert_, &roots);
        assert_eq!(e, ChainError::PrecertificateToAddChain);
        assert!(e.to_string().contains("add-pre-chain"));
    }
    for c in [
        chain(&["tesseract/test_leaf_cert_signed_by_root.pem"]),
        chain(&["tesseract/test_leaf_cert_signed_by_intermediate.pem", T_INT]),
    ] {
        let e = err(&c, Pre, &roots);
        assert_eq!(e, ChainError::CertificateToAddPreChain);
        assert!(e.to_string().contains("add-chain"));
    }
}

#[test]
fn tesseract_subleaf_chains() {
    // subleaf.chain ends at FakeCertificateAuthority: fake-ca.cert (the same DER as
    // Azul's fake-root-ca-cert.pem), not the TrustFabric test root.
    let c = chain(&["tesseract/subleaf.chain"]);
    assert_eq!(c.len(), 4);
    let v = ok(&c, Cert_, &roots(&["tesseract/fake-ca.cert"]));
    assert_issuers(&v, &[&c[1], &c[2], &c[3]]);
    assert!(matches!(
        err(&c, Cert_, &roots(&[T_ROOT])),
        ChainError::NoRoot { index: 3, .. }
    ));
    let e = err(
        &chain(&["tesseract/subleaf.misordered.chain"]),
        Cert_,
        &roots(&["tesseract/fake-ca.cert"]),
    );
    assert!(matches!(e, ChainError::NotIssuer { index: 0, .. }), "{e}");
}

#[test]
fn hammer_root_and_intermediate_parse_as_roots() {
    let (roots, warnings) = Roots::from_pem(
        &[
            read("tesseract/hammer/test_root_ca_cert.pem"),
            read("tesseract/hammer/test_intermediate_ca_cert.pem"),
        ]
        .concat(),
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(roots.len(), 2);
    // The intermediate validates against the root (RSA, sha256WithRSAEncryption).
    let only_root = self::roots(&["tesseract/hammer/test_root_ca_cert.pem"]);
    let c = chain(&["tesseract/hammer/test_intermediate_ca_cert.pem"]);
    assert_issuers(
        &ok(&c, Cert_, &only_root),
        &[&cert("tesseract/hammer/test_root_ca_cert.pem")],
    );
}

// ---------------------------------------------------------------------------------------
// Azul static_ct_api/tests: roots as in Azul's and TesseraCT's tests.

fn azul_roots() -> Roots {
    roots(&[
        "azul/fake-ca-cert.pem",
        "azul/fake-root-ca-cert.pem",
        "azul/ca-cert.pem",
        "azul/real-precert-intermediate.pem",
    ])
}

const A_LEAF: &str = "azul/leaf-signed-by-fake-intermediate-cert.pem";
const A_INT: &str = "azul/fake-intermediate-cert.pem";

#[test]
fn azul_valid_chains() {
    let roots = azul_roots();
    let fake_ca = cert("azul/fake-ca-cert.pem");
    let fake_root = cert("azul/fake-root-ca-cert.pem");
    // Two roots are named FakeCertificateAuthority (RSA and ECDSA): the one whose key
    // verifies is appended.
    let c = chain(&[A_LEAF, A_INT]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &fake_ca]);
    let c = chain(&[A_LEAF, A_INT, "azul/fake-ca-cert.pem"]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &fake_ca]);
    // Policy and name constraints (valid or not) are not enforced.
    for int in [
        "azul/fake-intermediate-with-policy-constraints-cert.pem",
        "azul/fake-intermediate-with-name-constraints-cert.pem",
        "azul/fake-intermediate-with-invalid-name-constraints-cert.pem",
    ] {
        let c = chain(&["azul/leaf-cert.pem", int]);
        assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &fake_root]);
    }
    let c = chain(&[
        "azul/leaf-cert.pem",
        "azul/fake-intermediate-with-policy-constraints-cert.pem",
        "azul/fake-root-ca-cert.pem",
    ]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &c[2]]);
    let c = chain(&["azul/subleaf.chain"]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &c[2], &c[3]]);
}

#[test]
fn azul_refused_chains() {
    let roots = azul_roots();
    let e = err(&chain(&[A_LEAF]), Cert_, &roots);
    assert!(
        matches!(e, ChainError::NoRoot { index: 0, .. }),
        "missing intermediate: {e}"
    );
    let e = err(&chain(&[A_INT, A_LEAF]), Cert_, &roots);
    assert!(
        matches!(e, ChainError::NotIssuer { index: 0, .. }),
        "wrong order: {e}"
    );
    let e = err(&chain(&[A_INT, "azul/test-cert.pem"]), Cert_, &roots);
    assert!(
        matches!(e, ChainError::NotIssuer { index: 0, .. }),
        "unrelated: {e}"
    );
    let e = err(
        &chain(&[A_LEAF, A_INT, "azul/test-cert.pem"]),
        Cert_,
        &roots,
    );
    assert!(
        matches!(e, ChainError::NotIssuer { index: 1, .. }),
        "unrelated after: {e}"
    );
    let c = chain(&[A_LEAF, A_INT, "azul/fake-ca-cert.pem", "azul/test-cert.pem"]);
    let e = err(&c, Cert_, &roots);
    assert!(
        matches!(e, ChainError::NotIssuer { index: 2, .. }),
        "unrelated after root: {e}"
    );
    let e = err(&chain(&["azul/subleaf.misordered.chain"]), Cert_, &roots);
    assert!(
        matches!(e, ChainError::NotIssuer { index: 0, .. }),
        "misordered: {e}"
    );
    let e = err(&chain(&[A_LEAF, A_INT, A_INT]), Cert_, &roots);
    assert_eq!(e, ChainError::Duplicate { index: 2, first: 1 });
}

#[test]
fn azul_mismatching_signature_algorithms_are_refused() {
    let roots = azul_roots();
    // The leaf: ecdsa-with-SHA256 inside, ecdsa-with-SHA384 outside.
    let e = err(&chain(&["azul/mismatching-sig-alg.pem"]), Cert_, &roots);
    assert_eq!(e, ChainError::MismatchedSignatureAlgorithm { index: 0 });
    // The intermediate: sha256WithRSAEncryption with NULL parameters inside, without
    // outside. Go's parser (TesseraCT) and Azul refuse it too.
    let c = chain(&[
        A_LEAF,
        "azul/fake-intermediate-with-mismatching-sig-alg.pem",
    ]);
    assert_eq!(
        err(&c, Cert_, &roots),
        ChainError::MismatchedSignatureAlgorithm { index: 1 }
    );
}

#[test]
fn azul_accepted_roots_as_leaf_or_intermediate() {
    // An intermediate configured as a root: the leaf alone, one issuer.
    let c = chain(&[A_LEAF]);
    assert_issuers(&ok(&c, Cert_, &roots(&[A_INT])), &[&cert(A_INT)]);
    // The leaf itself configured as a root: no issuers.
    assert_issuers(&ok(&c, Cert_, &roots(&[A_LEAF])), &[]);
}

#[test]
fn azul_cross_signed_root_not_accepted_without_its_issuer() {
    // cloudflare.pem ends with GTS Root R4 cross-signed by GlobalSign, not the
    // self-signed GTS Root R4 configured: every submitted certificate must be in the
    // path (RFC 6962), so the chain is refused (as Azul's CT mode does).
    let e = err(
        &chain(&["azul/cloudflare.pem"]),
        Cert_,
        &roots(&["azul/google-gts-root-r4.pem"]),
    );
    assert!(matches!(e, ChainError::NoRoot { index: 2, .. }), "{e}");
}

#[test]
fn azul_sha1_rsa_and_p521_chains_validate() {
    for (root, leaf, int) in [
        (
            "azul/sha1-rsa-root-ca-cert.pem",
            "azul/sha1-rsa-leaf-cert.pem",
            "azul/sha1-rsa-intermediate-cert.pem",
        ),
        (
            "azul/p521-ecdsa-root-ca-cert.pem",
            "azul/p521-ecdsa-leaf-cert.pem",
            "azul/p521-ecdsa-intermediate-cert.pem",
        ),
    ] {
        let c = chain(&[leaf, int]);
        assert_issuers(&ok(&c, Cert_, &roots(&[root])), &[&c[1], &cert(root)]);
    }
}

/// What aws-lc-rs checks cheaply is validated on the calling thread; a P-521 link (RustCrypto,
/// milliseconds) defers the whole chain, which [`validate`] then takes; a refusal is
/// the same either way, and deferring leaves no state behind.
#[test]
fn cheap_chains_validate_inline_and_costly_ones_are_deferred() {
    LEAF_CACHE_OFF.set(true);
    let now = now();
    let policy = ChainPolicy::default();
    let p521 = chain(&[
        "azul/p521-ecdsa-leaf-cert.pem",
        "azul/p521-ecdsa-intermediate-cert.pem",
    ]);
    let p521_roots = roots(&["azul/p521-ecdsa-root-ca-cert.pem"]);
    assert!(validate_if_cheap(&p521, Cert_, &p521_roots, &policy, now).is_none());
    assert!(validate(&p521, Cert_, &p521_roots, &policy, now).is_ok());
    let rsa = chain(&[
        "azul/sha1-rsa-leaf-cert.pem",
        "azul/sha1-rsa-intermediate-cert.pem",
    ]);
    let rsa_roots = roots(&["azul/sha1-rsa-root-ca-cert.pem"]);
    let inline = validate_if_cheap(&rsa, Cert_, &rsa_roots, &policy, now)
        .expect("RSA-2048 links are checked inline");
    assert_eq!(inline, validate(&rsa, Cert_, &rsa_roots, &policy, now));
    assert!(inline.is_ok());
    let mut bad = rsa.clone();
    *bad[0].last_mut().unwrap() ^= 1;
    let refused = validate_if_cheap(&bad, Cert_, &rsa_roots, &policy, now)
        .expect("a bad RSA signature is found inline");
    assert!(refused.is_err());
    assert_eq!(refused, validate(&bad, Cert_, &rsa_roots, &policy, now));
    // After a deferral, plain validation of the same chain is unaffected.
    assert!(validate_if_cheap(&p521, Cert_, &p521_roots, &policy, now).is_none());
    assert!(validate(&p521, Cert_, &p521_roots, &policy, now).is_ok());
    // A P-384 leaf (~0.2 ms in aws-lc-rs) is deferred too.
    let p384 = chain(&["tesseract/test_leaf_cert_signed_by_intermediate.pem", T_INT]);
    let p384_roots = roots(&["tesseract/test_root_ca_cert.pem"]);
    assert!(validate_if_cheap(&p384, Cert_, &p384_roots, &policy, now).is_none());
    assert!(validate(&p384, Cert_, &p384_roots, &policy, now).is_ok());
}

/// At most [`INLINE_CHECKS`] cheap checks inline, none costly; a deferral sticks until
/// the next validation; outside `validate_if_cheap` every check goes on.
#[test]
fn inline_checks_are_few_and_cheap() {
    assert!(inline_check(false).is_ok());
    INLINE.set(Some((0, false)));
    for _ in 0..INLINE_CHECKS {
        assert!(inline_check(true).is_ok());
    }
    assert!(inline_check(true).is_err());
    assert_eq!(INLINE.get(), Some((INLINE_CHECKS, true)));
    INLINE.set(Some((0, false)));
    assert!(inline_check(false).is_err());
    assert!(inline_check(true).is_err(), "once deferred, deferred");
    INLINE.set(None);
    assert!(inline_check(false).is_ok());
}

#[test]
fn azul_real_precertificates_validate() {
    let roots = azul_roots();
    let c = chain(&["azul/precert-valid.pem"]);
    let v = ok(&c, Pre, &roots);
    let ca = cert("azul/ca-cert.pem");
    assert_issuers(&v, &[&ca]);
    let (ikh, tbs, _) = precert_parts(&v);
    assert_eq!(ikh, spki_hash(&ca));
    assert_poison_removed(&c[0], tbs);

    // Issued by GTS CA 1D2, which the tests configure as a root (its own root,
    // GlobalSign R2, is not among the vectors).
    let c = chain(&["azul/real-precert-with-eku.pem"]);
    let v = ok(&c, Pre, &roots);
    let int = cert("azul/real-precert-intermediate.pem");
    assert_issuers(&v, &[&int]);
    let (ikh, tbs, _) = precert_parts(&v);
    assert_eq!(ikh, spki_hash(&int));
    assert_poison_removed(&c[0], tbs);
    assert_eq!(err(&c, Cert_, &roots), ChainError::PrecertificateToAddChain);
}

#[test]
fn azul_golden_tbs_is_the_precertificate_without_poison() {
    // Azul's golden file is its build_precert_tbs output for preissuer-chain.pem's
    // precertificate: the poison removed, nothing else (Azul now refuses pre-issuer
    // chains outright, so it never rewrites the issuer).
    let c = chain(&["azul/preissuer-chain.pem"]);
    let golden = read("azul/golden/preissuer-precert-tbs.der");
    let leaf = Cert::parse(&c[0]).unwrap();
    assert_eq!(precert_tbs(&leaf, None).unwrap(), golden);
    assert_poison_removed(&c[0], &golden);
}

#[test]
fn azul_preissuer_chain_rewrites_issuer_and_aki() {
    let c = chain(&["azul/preissuer-chain.pem"]);
    assert_eq!(c.len(), 4);
    let golden = read("azul/golden/preissuer-precert-tbs.der");
    let v = ok(&c, Pre, &roots(&["azul/test-roots.pem"]));
    assert_issuers(&v, &[&c[1], &c[2], &c[3]]);
    let (ikh, tbs, pre) = precert_parts(&v);
    // The key of the pre-issuer's issuer (RFC 6962 §3.2), not the pre-issuer's.
    assert_eq!(ikh, spki_hash(&c[2]));
    assert_eq!(pre, c[0].as_slice());
    // RFC 6962 §3.2: the TBS is the golden one (poison removed) with the issuer and
    // authorityKeyIdentifier of the final certificate: the pre-issuer's own.
    let pre_issuer = Cert::parse(&c[1]).unwrap();
    let want_aki = pre_issuer.extension(OID_AKI).unwrap().value;
    let (_, golden_tbs) = TbsCertificate::from_der(&golden).unwrap();
    let (_, got) = TbsCertificate::from_der(tbs).unwrap();
    assert_eq!(got.issuer.as_raw(), pre_issuer.issuer);
    assert_ne!(got.issuer.as_raw(), golden_tbs.issuer.as_raw());
    let aki = |t: &TbsCertificate<'_>| -> Vec<u8> {
        t.extensions()
            .iter()
            .find(|e| e.oid.as_bytes() == OID_AKI)
            .unwrap()
            .value
            .to_vec()
    };
    assert_eq!(aki(&got), want_aki);
    assert_ne!(aki(&golden_tbs), want_aki);
    // Everything else is the golden TBS's, byte for byte.
    let fields = |d: &[u8]| -> Vec<Vec<u8>> {
        Reader::new(der::read_exact(d, der::SEQUENCE).unwrap().value)
            .all()
            .unwrap()
            .iter()
            .map(|f| f.raw.to_vec())
            .collect()
    };
    let (got_f, golden_f) = (fields(tbs), fields(&golden));
    let issuer_at = leaf_issuer_field(&c[0]);
    for (i, (g, w)) in got_f.iter().zip(&golden_f).enumerate() {
        if i != issuer_at && i + 1 != golden_f.len() {
            assert_eq!(g, w, "TBS field {i}");
        }
    }
    let ext_raws = |t: &TbsCertificate<'_>| -> Vec<(Vec<u8>, bool, Vec<u8>)> {
        t.extensions()
            .iter()
            .map(|e| (e.oid.as_bytes().to_vec(), e.critical, e.value.to_vec()))
            .collect()
    };
    let mut want_exts = ext_raws(&golden_tbs);
    for e in &mut want_exts {
        if e.0 == OID_AKI {
            e.2 = want_aki.to_vec();
        }
    }
    assert_eq!(ext_raws(&got), want_exts);
    assert_eq!(
        tbs.len(),
        golden.len() + pre_issuer.issuer.len() - golden_tbs.issuer.as_raw().len()
    );

    // The submitter stops at the pre-issuer; its issuer is a configured root and is
    // appended: the same entry.
    let short = c[..2].to_vec();
    let (intermediate_root, w) = Roots::from_pem(pem_of(&c[2]).as_bytes());
    assert!(w.is_empty());
    let v2 = ok(&short, Pre, &intermediate_root);
    assert_eq!(v2.submission.entry, v.submission.entry);
    assert_issuers(&v2, &[&c[1], &c[2]]);

    // The pre-issuer itself configured as a root: it has no issuer in the path.
    let (pre_issuer_root, w) = Roots::from_pem(pem_of(&c[1]).as_bytes());
    assert!(w.is_empty());
    assert_eq!(
        err(&c[..1], Pre, &pre_issuer_root),
        ChainError::PreIssuerWithoutIssuer
    );
    // As a certificate chain the precertificate goes nowhere.
    assert_eq!(
        err(&c, Cert_, &roots(&["azul/test-roots.pem"])),
        ChainError::PrecertificateToAddChain
    );
    // A log may refuse pre-issuers (static-ct-api; Sunlight, Azul).
    let refuse = ChainPolicy {
        reject_pre_issuers: true,
        ..Default::default()
    };
    assert_eq!(
        with_policy(&c, Pre, &roots(&["azul/test-roots.pem"]), &refuse),
        Err(ChainError::PreIssuerRefused)
    );
    with_policy(
        &chain(&["azul/precert-valid.pem"]),
        Pre,
        &azul_roots(),
        &refuse,
    )
    .unwrap();
}

fn leaf_issuer_field(der: &[u8]) -> usize {
    Cert::parse(der).unwrap().issuer_field
}

fn pem_of(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(line).unwrap());
        s.push('\n');
    }
    s.push_str("-----END CERTIFICATE-----\n");
    s
}

// ---------------------------------------------------------------------------------------
// tlogd's chains: algorithm combinations, pathLenConstraint, non-CA issuers.

#[test]
fn ecdsa_and_rsa_digest_and_curve_combinations() {
    // root P-384 (self-signed with SHA-256) → int-a P-521 (signed by root with SHA-512)
    // → leaf-a (signed by int-a with SHA-256).
    let roots = roots(&["tlogd/root.pem"]);
    let c = chain(&["tlogd/leaf-a.pem", "tlogd/int-a.pem"]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &cert("tlogd/root.pem")]);
    // int-b (RSA) as a root: sha512WithRSAEncryption and sha384WithRSAEncryption.
    let int_b = self::roots(&["tlogd/int-b.pem"]);
    for leaf in ["tlogd/leaf-b.pem", "tlogd/leaf-c.pem"] {
        assert_issuers(
            &ok(&chain(&[leaf]), Cert_, &int_b),
            &[&cert("tlogd/int-b.pem")],
        );
    }
    // Ed25519.
    let c = chain(&["tlogd/ed-leaf.pem"]);
    assert_issuers(
        &ok(&c, Cert_, &self::roots(&["tlogd/ed-root.pem"])),
        &[&cert("tlogd/ed-root.pem")],
    );
}

#[test]
fn path_len_constraint_is_enforced() {
    // int-a has pathlen:0 and int-b (a CA) below it.
    let roots = roots(&["tlogd/root.pem"]);
    let c = chain(&["tlogd/leaf-b.pem", "tlogd/int-b.pem", "tlogd/int-a.pem"]);
    assert_eq!(
        err(&c, Cert_, &roots),
        ChainError::PathLen {
            which: PathCert::Submitted(2),
            max: 0,
            found: 1
        }
    );
    // With int-a as the accepted root, it is trusted as configured (TesseraCT: roots
    // are anchors, not checked against their own constraints).
    let int_a = cert("tlogd/int-a.pem");
    assert_issuers(
        &ok(&c[..2], Cert_, &self::roots(&["tlogd/int-a.pem"])),
        &[&c[1], &int_a],
    );
}

#[test]
fn issuers_must_be_cas() {
    let roots = roots(&["tlogd/root.pem"]);
    let c = chain(&["tlogd/leaf-n.pem", "tlogd/notca.pem"]);
    assert_eq!(
        err(&c, Cert_, &roots),
        ChainError::NotCa {
            which: PathCert::Submitted(1)
        }
    );
    // A configured root is an anchor even without basicConstraints.
    assert_issuers(
        &ok(&c[..1], Cert_, &self::roots(&["tlogd/notca.pem"])),
        &[&cert("tlogd/notca.pem")],
    );
    // The root given by the submitter: int-a (pathlen:0) has no CA below it.
    let c = chain(&["tlogd/leaf-a.pem", "tlogd/int-a.pem", "tlogd/root.pem"]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&c[1], &c[2]]);
}

// ---------------------------------------------------------------------------------------
// Policy.

#[test]
fn expired_and_unexpired() {
    let roots = roots(&[T_ROOT]);
    // notAfter 2025-12-05T18:05:50Z.
    let c = chain(&["tesseract/test_leaf_cert_signed_by_root.pem"]);
    let expired = ChainPolicy {
        reject_expired: true,
        ..Default::default()
    };
    let e = validate(&c, Cert_, &roots, &expired, day(2026, 1, 1)).unwrap_err();
    assert_eq!(
        e,
        ChainError::Expired {
            not_after: "2025-12-05T18:05:50Z".into()
        }
    );
    validate(&c, Cert_, &roots, &expired, day(2025, 1, 1)).unwrap();
    let unexpired = ChainPolicy {
        reject_unexpired: true,
        ..Default::default()
    };
    validate(&c, Cert_, &roots, &unexpired, day(2026, 1, 1)).unwrap();
    assert!(matches!(
        validate(&c, Cert_, &roots, &unexpired, day(2025, 1, 1)),
        Err(ChainError::NotExpired { .. })
    ));
    // By default an expired leaf is logged (the CT hammer's leaves expired in 2024).
    ok(&c, Cert_, &roots);
}

#[test]
fn not_after_shard_window() {
    // leaf-signed-by-fake-intermediate: notAfter 2019-07-12T14:26:44Z.
    let roots = roots(&["azul/fake-ca-cert.pem"]);
    let c = chain(&[A_LEAF, A_INT]);
    let window = |start: Option<u64>, limit: Option<u64>| ChainPolicy {
        not_after_start: start,
        not_after_limit: limit,
        ..Default::default()
    };
    with_policy(&c, Cert_, &roots, &window(None, None)).unwrap();
    with_policy(
        &c,
        Cert_,
        &roots,
        &window(Some(day(2018, 1, 1)), Some(day(2020, 7, 1))),
    )
    .unwrap();
    let e = with_policy(&c, Cert_, &roots, &window(Some(day(2020, 1, 1)), None)).unwrap_err();
    assert_eq!(
        e,
        ChainError::NotAfterTooEarly {
            not_after: "2019-07-12T14:26:44Z".into(),
            start: "2020-01-01T00:00:00Z".into()
        }
    );
    let e = with_policy(&c, Cert_, &roots, &window(None, Some(day(1999, 1, 1)))).unwrap_err();
    assert!(matches!(e, ChainError::NotAfterTooLate { .. }), "{e}");
    // The start is inclusive, the limit exclusive.
    let not_after = day(2019, 7, 12) + (14 * 3600 + 26 * 60 + 44) * 1000;
    with_policy(
        &c,
        Cert_,
        &roots,
        &window(Some(not_after), Some(not_after + 1)),
    )
    .unwrap();
    assert!(with_policy(&c, Cert_, &roots, &window(None, Some(not_after))).is_err());
}

#[test]
fn rejected_extensions() {
    let roots = azul_roots();
    let cert_chain = chain(&[A_LEAF, A_INT]);
    let pre_chain = chain(&["azul/precert-valid.pem"]);
    let reject = |oid: &str| ChainPolicy {
        rejected_extensions: vec![oid.into()],
        ..Default::default()
    };
    with_policy(&cert_chain, Cert_, &roots, &reject("99.99.99.99")).unwrap();
    with_policy(&pre_chain, Pre, &roots, &reject("99.99.99.99")).unwrap();
    assert_eq!(
        with_policy(&cert_chain, Cert_, &roots, &reject("2.5.29.37")),
        Err(ChainError::RejectedExtension {
            oid: "2.5.29.37".into()
        })
    );
    // precert-valid has no extKeyUsage; its authorityKeyIdentifier will do.
    assert!(with_policy(&pre_chain, Pre, &roots, &reject("2.5.29.35")).is_err());
}

#[test]
fn extended_key_usages() {
    const SERVER_AUTH: &str = "1.3.6.1.5.5.7.3.1";
    const EMAIL: &str = "1.3.6.1.5.5.7.3.4";
    let roots = azul_roots();
    let ekus = |list: &[&str]| ChainPolicy {
        allowed_ekus: list.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let cert_chain = chain(&[A_LEAF, A_INT]);
    let pre_chain = chain(&["azul/real-precert-with-eku.pem"]);
    for (c, kind) in [(&cert_chain, Cert_), (&pre_chain, Pre)] {
        with_policy(c, kind, &roots, &ekus(&[SERVER_AUTH])).unwrap();
        with_policy(c, kind, &roots, &ekus(&[EMAIL, SERVER_AUTH])).unwrap();
        let e = with_policy(c, kind, &roots, &ekus(&[EMAIL])).unwrap_err();
        assert_eq!(
            e,
            ChainError::ExtKeyUsage {
                allowed: EMAIL.into()
            }
        );
    }
    // subleaf has no extKeyUsage: refused when EKUs are required (TesseraCT, Azul),
    // accepted when anyExtendedKeyUsage is listed.
    let subleaf = chain(&["azul/subleaf.chain"]);
    assert!(with_policy(&subleaf, Cert_, &roots, &ekus(&[SERVER_AUTH])).is_err());
    with_policy(&subleaf, Cert_, &roots, &ekus(&[ANY_EKU, EMAIL])).unwrap();
    // tlogd's leaf-c has none either.
    assert!(matches!(
        with_policy(
            &chain(&["tlogd/leaf-c.pem"]),
            Cert_,
            &self::roots(&["tlogd/int-b.pem"]),
            &ekus(&[SERVER_AUTH])
        ),
        Err(ChainError::ExtKeyUsage { .. })
    ));
}

// ---------------------------------------------------------------------------------------
// Malformed input.

#[test]
fn empty_long_and_garbage_chains() {
    let roots = azul_roots();
    assert_eq!(err(&[], Cert_, &roots), ChainError::Empty);
    let long = vec![cert(A_LEAF); MAX_CHAIN_LEN + 1];
    assert_eq!(
        err(&long, Cert_, &roots),
        ChainError::TooLong {
            len: MAX_CHAIN_LEN + 1,
            max: MAX_CHAIN_LEN
        }
    );
    let e = err(&[cert(A_LEAF), b"garbage".to_vec()], Cert_, &roots);
    assert!(matches!(e, ChainError::Malformed { index: 1, .. }), "{e}");
    let mut trailing = cert(A_LEAF);
    trailing.push(0);
    let e = err(&[trailing], Cert_, &roots);
    assert!(matches!(e, ChainError::Malformed { index: 0, .. }), "{e}");
    // A certificate cut short anywhere does not parse (and does not panic).
    let leaf = cert(A_LEAF);
    for n in 0..leaf.len() {
        assert!(
            validate(
                &[leaf[..n].to_vec()],
                Cert_,
                &roots,
                &ChainPolicy::default(),
                now()
            )
            .is_err()
        );
    }
}

#[test]
fn a_corrupted_signature_is_refused() {
    let roots = azul_roots();
    let mut c = chain(&[A_LEAF, A_INT]);
    let last = c[0].len() - 1;
    c[0][last] ^= 1;
    let e = err(&c, Cert_, &roots);
    assert!(matches!(e, ChainError::NotIssuer { index: 0, .. }), "{e}");
    assert!(e.to_string().contains("signature"), "{e}");
}

#[test]
fn ca_certificates_are_parsed_once_and_checked_against_the_roots_every_time() {
    let roots = azul_roots();
    let c = chain(&[A_LEAF, A_INT]);
    let first = ok(&c, Cert_, &roots);
    // The intermediate of a chain that validated is kept parsed, found by its bytes,
    // and gives the same answer.
    assert!(cached_ca(&c[1]).is_some());
    assert_eq!(ok(&c, Cert_, &roots), first);
    // The leaf is checked every time, under a kept intermediate too.
    let mut bad = c.clone();
    let last = bad[0].len() - 1;
    bad[0][last] ^= 1;
    assert!(matches!(
        err(&bad, Cert_, &roots),
        ChainError::NotIssuer { index: 0, .. }
    ));
    // A kept intermediate does not stand for a root: under roots that do not hold
    // its issuer, the chain has none.
    let e = err(&c, Cert_, &super::tests::roots(&[T_ROOT]));
    assert!(matches!(e, ChainError::NoRoot { index: 1, .. }), "{e}");
}

#[test]
fn ca_certificates_of_refused_chains_are_not_kept() {
    let roots = azul_roots();
    let mut c = chain(&[A_LEAF, A_INT]);
    // The intermediate's own signature broken: it still parses, and still signs the
    // leaf, but no root signed it.
    let last = c[1].len() - 1;
    c[1][last] ^= 1;
    let e = err(&c, Cert_, &roots);
    assert!(matches!(e, ChainError::NoRoot { index: 1, .. }), "{e}");
    assert!(cached_ca(&c[1]).is_none());
    assert!(cached_ca(&c[0]).is_none());
}

/// Replaces the first occurrence of `from` in `der` by `to` (same length).
fn patched(der: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = der
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern");
    let mut out = der.to_vec();
    out[at..at + from.len()].copy_from_slice(to);
    out
}

#[test]
fn invalid_poison_is_refused() {
    let roots = azul_roots();
    let pre = cert("azul/precert-valid.pem");
    let mut poison = vec![0x06, 0x0a];
    poison.extend_from_slice(OID_CT_POISON);
    let critical = [&poison[..], &[0x01, 0x01, 0xff, 0x04, 0x02, 0x05, 0x00]].concat();
    let not_critical = [&poison[..], &[0x01, 0x01, 0x00, 0x04, 0x02, 0x05, 0x00]].concat();
    let not_null = [&poison[..], &[0x01, 0x01, 0xff, 0x04, 0x02, 0x04, 0x00]].concat();
    assert_eq!(
        err(&[patched(&pre, &critical, &not_critical)], Pre, &roots),
        ChainError::InvalidPoison("it is not critical")
    );
    assert_eq!(
        err(&[patched(&pre, &critical, &not_null)], Cert_, &roots),
        ChainError::InvalidPoison("its value is not ASN.1 NULL")
    );
}

#[test]
fn unsupported_algorithms_are_named() {
    let roots = azul_roots();
    let mut c = chain(&[A_LEAF, A_INT]);
    // The intermediate signed the leaf with sha256WithRSAEncryption; call it sha224WithRSAEncryption
    // in both places (the signature no longer matters: the algorithm is refused first).
    let from = OID_RSA_SHA256;
    let to = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0e];
    c[0] = patched(&c[0], from, &to);
    c[0] = patched(&c[0], from, &to);
    let e = err(&c, Cert_, &roots);
    assert_eq!(
        e,
        ChainError::UnsupportedAlgorithm {
            index: 0,
            algorithm: "sha224WithRSAEncryption (1.2.840.113549.1.1.14)".into()
        }
    );
}

// ---------------------------------------------------------------------------------------
// Roots.

#[test]
fn roots_from_pem_skip_garbage_and_dedup() {
    let a = read("azul/fake-ca-cert.pem");
    let b = read("azul/ca-cert.pem");
    let garbage =
        b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
    let bad_b64 = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
    let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let unterminated = b"-----BEGIN CERTIFICATE-----\nAAAA\n";
    let bundle = [
        &b"# a comment line\n"[..],
        &a,
        garbage,
        &b,
        key,
        &a,
        bad_b64,
        &b,
        unterminated,
    ]
    .concat();
    let (roots, warnings) = Roots::from_pem(&bundle);
    assert_eq!(roots.len(), 2, "deduplicated");
    assert!(!roots.is_empty());
    let ders: Vec<&[u8]> = roots.ders().collect();
    assert_eq!(
        ders,
        [
            cert("azul/fake-ca-cert.pem").as_slice(),
            cert("azul/ca-cert.pem").as_slice()
        ]
    );
    assert_eq!(warnings.len(), 4, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("PEM block 2 is not a usable certificate"),
        "{}",
        warnings[0]
    );
    assert!(warnings[1].contains("PRIVATE KEY"), "{}", warnings[1]);
    assert!(warnings[2].contains("base64"), "{}", warnings[2]);
    assert!(warnings[3].contains("no END line"), "{}", warnings[3]);
    assert!(warnings.iter().all(|w| !w.contains('\n')));

    let (empty, w) = Roots::from_pem(b"nothing here");
    assert!(empty.is_empty() && w.is_empty());
}

#[test]
fn roots_union_keeps_every_root_in_order() {
    let ab = roots(&["azul/fake-ca-cert.pem", "azul/ca-cert.pem"]);
    let bc = roots(&["azul/ca-cert.pem", "azul/fake-root-ca-cert.pem"]);
    let u = ab.union(&bc);
    let want = [
        cert("azul/fake-ca-cert.pem"),
        cert("azul/ca-cert.pem"),
        cert("azul/fake-root-ca-cert.pem"),
    ];
    assert_eq!(
        u.ders().collect::<Vec<_>>(),
        want.iter().map(Vec::as_slice).collect::<Vec<_>>()
    );
    assert!(u.contains(&sha(&want[2])));
    // The union validates what either validated.
    let c = chain(&[
        "azul/leaf-cert.pem",
        "azul/fake-intermediate-with-name-constraints-cert.pem",
    ]);
    assert!(validate(&c, Cert_, &ab, &ChainPolicy::default(), now()).is_err());
    ok(&c, Cert_, &u);
}

#[test]
fn times_print_as_rfc3339() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(
        rfc3339(day(2000, 2, 29) as i64 + 3_723_000),
        "2000-02-29T01:02:03Z"
    );
    assert_eq!(rfc3339(-1000), "1969-12-31T23:59:59Z");
    assert_eq!(rfc3339(day(2126, 11, 3) as i64), "2126-11-03T00:00:00Z");
}

#[test]
fn errors_are_one_line() {
    let roots = azul_roots();
    let cases = [
        chain(&[A_LEAF]),
        chain(&[A_INT, A_LEAF]),
        chain(&["azul/subleaf.misordered.chain"]),
        chain(&["azul/mismatching-sig-alg.pem"]),
    ];
    for c in cases {
        let msg = err(&c, Cert_, &roots).to_string();
        assert!(!msg.contains('\n') && !msg.is_empty(), "{msg}");
    }
}

/// RSA links go through aws-lc-rs when it takes the key, and it answers as the `rsa` crate
/// does: PKCS#1 v1.5 with SHA-1 and SHA-256 and PSS links of the test data verify both
/// ways, and with one signature bit flipped fail both ways.
#[test]
fn aws_lc_and_the_rsa_crate_agree_on_rsa_links() {
    let mut seen = Vec::new();
    for (child, issuer) in [
        (
            "azul/sha1-rsa-leaf-cert.pem",
            "azul/sha1-rsa-intermediate-cert.pem",
        ),
        (
            "azul/sha1-rsa-intermediate-cert.pem",
            "azul/sha1-rsa-root-ca-cert.pem",
        ),
        (
            "tesseract/hammer/test_intermediate_ca_cert.pem",
            "tesseract/hammer/test_root_ca_cert.pem",
        ),
        ("tlogd/leaf-p.pem", "tlogd/int-b.pem"),
    ] {
        let (c, i) = (cert(child), cert(issuer));
        let issuer_cert = Cert::parse(&i).unwrap();
        let child_cert = Cert::parse(&c).unwrap();
        let alg = signature_algorithm(&child_cert.sig_alg).unwrap();
        seen.push(alg);
        let (_, parsed) = x509_parser::parse_x509_certificate(&i).unwrap();
        let key = &parsed.public_key().subject_public_key.data;
        assert!(
            fast_rsa(key, alg).is_some(),
            "{issuer}: aws-lc-rs takes its key"
        );
        for fast in [true, false] {
            verify_signature_by(&child_cert, &issuer_cert, fast)
                .unwrap_or_else(|e| panic!("{child} (aws-lc-rs: {fast}): {e:?}"));
        }
        let mut bad = c.clone();
        *bad.last_mut().unwrap() ^= 1;
        let bad = Cert::parse(&bad).unwrap();
        for fast in [true, false] {
            assert!(
                verify_signature_by(&bad, &issuer_cert, fast).is_err(),
                "{child} flipped (aws-lc-rs: {fast})"
            );
        }
    }
    for alg in [
        SigAlg::RsaPkcs1(Hash::Sha1),
        SigAlg::RsaPkcs1(Hash::Sha256),
        SigAlg::RsaPss(Hash::Sha256),
    ] {
        assert!(seen.contains(&alg), "{alg:?} not covered: {seen:?}");
    }
}

/// An issuer's key parsed for one algorithm (`verify_fast`) is used for that algorithm
/// only: a signature under another still verifies, and a bad one under the parsed key
/// still fails.
#[test]
fn an_issuer_key_parsed_once_serves_only_its_algorithm() {
    let (c, i) = (
        cert("azul/sha1-rsa-intermediate-cert.pem"),
        cert("azul/sha1-rsa-root-ca-cert.pem"),
    );
    let issuer = Cert::parse(&i).unwrap();
    let child = Cert::parse(&c).unwrap();
    assert_eq!(
        signature_algorithm(&child.sig_alg).unwrap(),
        SigAlg::RsaPkcs1(Hash::Sha1)
    );
    let (_, parsed) = x509_parser::parse_x509_certificate(&i).unwrap();
    let key = &parsed.public_key().subject_public_key.data;
    let sha256 = SigAlg::RsaPkcs1(Hash::Sha256);
    let (params, _) = fast_rsa(key, sha256).unwrap();
    let signature = whole_bytes(child.signature).unwrap();
    // The SHA-1 signature read as SHA-256 fails, and leaves the key parsed for SHA-256.
    assert!(verify_fast(&issuer, sha256, params, key, child.tbs, signature).is_err());
    assert!(matches!(issuer.fast_key.get(), Some(Some((a, _))) if *a == sha256));
    verify_signature_by(&child, &issuer, true).expect("SHA-1 under a key parsed for SHA-256");
    let mut bad = c.clone();
    *bad.last_mut().unwrap() ^= 1;
    let bad = Cert::parse(&bad).unwrap();
    // Parsed for SHA-1 now, on a fresh parse of the issuer: the good one verifies, the
    // flipped one does not.
    let issuer = Cert::parse(&i).unwrap();
    verify_signature_by(&child, &issuer, true).unwrap();
    assert!(
        matches!(issuer.fast_key.get(), Some(Some((a, _))) if *a == SigAlg::RsaPkcs1(Hash::Sha1))
    );
    assert!(verify_signature_by(&bad, &issuer, true).is_err());
}

/// ECDSA links go through aws-lc-rs when it takes them (P-256 and P-384, SHA-256 and
/// SHA-384, uncompressed points), and it answers as RustCrypto does: over every pair
/// of an ECDSA-signed certificate and an EC-keyed certificate of the test data, both
/// accept or both refuse, a flipped signature bit fails both, and aws-lc-rs's cases cover
/// P-256 and P-384 links that verify.
#[test]
fn aws_lc_and_rustcrypto_agree_on_ecdsa_links() {
    let mut files = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(dir())];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "pem") {
                files.push(p);
            }
        }
    }
    let ders: Vec<Vec<u8>> = files
        .iter()
        .flat_map(|p| pem_blocks(&std::fs::read(p).unwrap()))
        .filter_map(|b| match b {
            PemBlock::Block { label, body: Ok(d) } if label == "CERTIFICATE" => Some(d),
            _ => None,
        })
        .filter(|d| Cert::parse(d).is_ok())
        .collect();
    let ecdsa_signed: Vec<&Vec<u8>> = ders
        .iter()
        .filter(|d| {
            let c = Cert::parse(d).unwrap();
            matches!(signature_algorithm(&c.sig_alg), Ok(SigAlg::Ecdsa(_)))
        })
        .collect();
    let mut fast_verified = std::collections::BTreeSet::new();
    for child in &ecdsa_signed {
        let child_cert = Cert::parse(child).unwrap();
        let Ok(SigAlg::Ecdsa(hash)) = signature_algorithm(&child_cert.sig_alg) else {
            unreachable!()
        };
        for issuer in &ders {
            let issuer_cert = Cert::parse(issuer).unwrap();
            let (_, parsed) = x509_parser::parse_x509_certificate(issuer).unwrap();
            let spki = parsed.public_key();
            let Some(curve) = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
            else {
                continue;
            };
            let curve = curve.as_bytes().to_vec();
            let point = &spki.subject_public_key.data;
            let by_fast = verify_signature_by(&child_cert, &issuer_cert, true).is_ok();
            let by_rustcrypto = verify_signature_by(&child_cert, &issuer_cert, false).is_ok();
            assert_eq!(by_fast, by_rustcrypto, "aws-lc-rs and RustCrypto disagree");
            if by_fast && fast_ecdsa(&curve, point, hash).is_some() {
                fast_verified.insert((curve.clone(), hash.len()));
                let mut bad = child.to_vec();
                *bad.last_mut().unwrap() ^= 1;
                let bad = Cert::parse(&bad).unwrap();
                for fast in [true, false] {
                    assert!(verify_signature_by(&bad, &issuer_cert, fast).is_err());
                }
            }
        }
    }
    for covered in [(OID_P256.to_vec(), 32), (OID_P384.to_vec(), 48)] {
        assert!(
            fast_verified.contains(&covered),
            "{covered:?} not covered: {fast_verified:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// RSA-PSS and TBS surgery edge cases.

#[test]
fn rsa_pss_validates_in_go_s_parameter_forms() {
    let roots = roots(&["tlogd/int-b.pem"]);
    let c = chain(&["tlogd/leaf-p.pem"]);
    assert_issuers(&ok(&c, Cert_, &roots), &[&cert("tlogd/int-b.pem")]);
    // A salt of 16 bytes (in both algorithm identifiers) is a form Go refuses.
    let salt32 = [0xa2, 0x03, 0x02, 0x01, 0x20];
    let salt16 = [0xa2, 0x03, 0x02, 0x01, 0x10];
    let odd = patched(&patched(&c[0], &salt32, &salt16), &salt32, &salt16);
    let e = err(&[odd], Cert_, &roots);
    assert!(
        matches!(&e, ChainError::UnsupportedAlgorithm { index: 0, algorithm } if algorithm.starts_with("RSASSA-PSS")),
        "{e}"
    );
}

/// `der` with its extensions replaced by `f`'s (the signature kept, so no longer
/// valid: for TBS surgery only).
fn with_extensions(der_: &[u8], f: impl Fn(&[Ext<'_>]) -> Vec<Vec<u8>>) -> Vec<u8> {
    let c = Cert::parse(der_).unwrap();
    let exts = f(&c.extensions);
    let mut fields: Vec<Vec<u8>> = c
        .tbs_fields
        .iter()
        .filter(|t| t.tag != der::CONTEXT_3)
        .map(|t| t.raw.to_vec())
        .collect();
    if !exts.is_empty() {
        fields.push(der::wrap(
            der::CONTEXT_3,
            &[der::wrap(der::SEQUENCE, &exts)],
        ));
    }
    let tbs = der::wrap(der::SEQUENCE, &fields);
    let sig = der::wrap(der::BIT_STRING, &[c.signature]);
    der::wrap(der::SEQUENCE, &[tbs, c.sig_alg.raw.to_vec(), sig])
}

fn keep(exts: &[Ext<'_>], drop: &[&[u8]]) -> Vec<Vec<u8>> {
    exts.iter()
        .filter(|e| !drop.contains(&e.oid))
        .map(|e| e.raw.to_vec())
        .collect()
}

fn tbs_exts(tbs: &[u8]) -> Vec<Vec<u8>> {
    let fields = Reader::new(der::read_exact(tbs, der::SEQUENCE).unwrap().value)
        .all()
        .unwrap();
    fields
        .iter()
        .find(|f| f.tag == der::CONTEXT_3)
        .map(|f| {
            parse_extensions(f.value)
                .unwrap()
                .iter()
                .map(|e| e.raw.to_vec())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn precert_tbs_edge_cases() {
    let c = chain(&["azul/preissuer-chain.pem"]);
    let pre_issuer = Cert::parse(&c[1]).unwrap();
    let pre_aki = pre_issuer.extension(OID_AKI).unwrap().value;

    // Only the poison: the extensions field goes (Go's omitempty), the rest stays.
    let only_poison = with_extensions(&c[0], |e| {
        e.iter()
            .filter(|e| e.oid == OID_CT_POISON)
            .map(|e| e.raw.to_vec())
            .collect()
    });
    let leaf = Cert::parse(&only_poison).unwrap();
    let want: Vec<&[u8]> = leaf
        .tbs_fields
        .iter()
        .filter(|f| f.tag != der::CONTEXT_3)
        .map(|f| f.raw)
        .collect();
    assert_eq!(
        precert_tbs(&leaf, None).unwrap(),
        der::wrap(der::SEQUENCE, &want)
    );

    // A precertificate without authorityKeyIdentifier: the pre-issuer's is appended.
    let no_aki = with_extensions(&c[0], |e| keep(e, &[OID_AKI]));
    let leaf = Cert::parse(&no_aki).unwrap();
    assert!(leaf.extension(OID_AKI).is_none());
    let got = tbs_exts(&precert_tbs(&leaf, Some(&pre_issuer)).unwrap());
    let mut want = keep(&leaf.extensions, &[OID_CT_POISON]);
    want.push(aki_extension(false, pre_aki));
    assert_eq!(got, want);

    // A pre-issuer without authorityKeyIdentifier: the precertificate's is removed.
    let bare = with_extensions(&c[1], |e| keep(e, &[OID_AKI]));
    let bare_issuer = Cert::parse(&bare).unwrap();
    let leaf = Cert::parse(&c[0]).unwrap();
    let tbs = precert_tbs(&leaf, Some(&bare_issuer)).unwrap();
    assert_eq!(
        tbs_exts(&tbs),
        keep(&leaf.extensions, &[OID_CT_POISON, OID_AKI])
    );
    let (_, parsed) = TbsCertificate::from_der(&tbs).unwrap();
    assert_eq!(parsed.issuer.as_raw(), bare_issuer.issuer);

    // The replacement keeps the precertificate's critical flag.
    assert_eq!(
        aki_extension(true, &[0x30, 0x00]),
        [
            0x30, 0x0c, 0x06, 0x03, 0x55, 0x1d, 0x23, 0x01, 0x01, 0xff, 0x04, 0x02, 0x30, 0x00
        ]
    );
}

/// A CA certificate's signature, once verified, is remembered: the same intermediate
/// again is not checked twice; but the memory is of those exact bytes, so the same
/// intermediate with one signature bit flipped is still refused afterwards.
#[test]
fn remembered_ca_signatures_cover_only_their_bytes() {
    let roots = roots(&["tesseract/test_root_ca_cert.pem"]);
    let c = chain(&[
        "tesseract/test_leaf_cert_signed_by_intermediate.pem",
        "tesseract/test_intermediate_ca_cert.pem",
    ]);
    ok(&c, Cert_, &roots);
    ok(&c, Cert_, &roots);
    let mut bad = c.clone();
    let last = bad[1].len() - 1;
    bad[1][last] ^= 1;
    assert!(
        validate(&bad, Cert_, &roots, &ChainPolicy::default(), now()).is_err(),
        "a corrupted intermediate signature passed after the good one was remembered"
    );
}

/// `der` with its subjectPublicKeyInfo replaced by `spki` (its signature, kept, no
/// longer verifies: the checks before any signature do not look at it).
fn with_spki(der: &[u8], spki: &[u8]) -> Vec<u8> {
    let c = Cert::parse(der).expect("parses");
    let first = usize::from(
        c.tbs_fields
            .first()
            .is_some_and(|f| f.tag == der::CONTEXT_0),
    );
    let fields: Vec<&[u8]> = c
        .tbs_fields
        .iter()
        .enumerate()
        .map(|(i, f)| if i == first + 5 { spki } else { f.raw })
        .collect();
    let tbs = der::wrap(der::SEQUENCE, &fields);
    let sig = der::wrap(der::BIT_STRING, &[c.signature]);
    der::wrap(der::SEQUENCE, &[&tbs[..], c.sig_alg.raw, &sig[..]])
}

/// An RSA subjectPublicKeyInfo with a modulus of `bits` bits (top bit set, odd) and
/// the exponent `e` (big-endian, no leading zero).
fn rsa_spki(bits: usize, e: &[u8]) -> Vec<u8> {
    let mut n = vec![0u8; 1 + bits / 8];
    n[1] = 0x80;
    n[bits / 8] |= 1;
    let e = if e[0] & 0x80 != 0 {
        [&[0u8][..], e].concat()
    } else {
        e.to_vec()
    };
    let key = der::wrap(
        der::SEQUENCE,
        &[der::wrap(der::INTEGER, &[n]), der::wrap(der::INTEGER, &[e])],
    );
    let alg = der::wrap(
        der::SEQUENCE,
        &[der::wrap(der::OID, &[OID_RSA_KEY]), vec![0x05, 0x00]],
    );
    der::wrap(
        der::SEQUENCE,
        &[alg, der::wrap(der::BIT_STRING, &[&[0u8][..], &key[..]])],
    )
}

/// #62: a chain that names no accepted root costs no signature check: under the
/// inline budget, a chain of P-521 links (milliseconds each in RustCrypto) is refused
/// at once instead of deferred to be verified link by link.
#[test]
fn a_chain_that_reaches_no_root_costs_no_signature_check() {
    LEAF_CACHE_OFF.set(true);
    let p521 = chain(&[
        "azul/p521-ecdsa-leaf-cert.pem",
        "azul/p521-ecdsa-intermediate-cert.pem",
    ]);
    let e = validate_if_cheap(
        &p521,
        Cert_,
        &roots(&[T_ROOT]),
        &ChainPolicy::default(),
        now(),
    )
    .expect("refused without a costly check")
    .unwrap_err();
    assert!(
        matches!(&e, ChainError::NoRoot { index: 1, why, .. } if why.contains("no accepted root has that name")),
        "{e}"
    );
}

/// #62: signatures are checked from the root down, so a made-up link under an
/// accepted root's name fails at the first check, under the root's own key, before any
/// costly key below it is used.
#[test]
fn a_made_up_link_under_a_root_fails_at_the_first_check() {
    LEAF_CACHE_OFF.set(true);
    let p521 = chain(&[
        "azul/p521-ecdsa-leaf-cert.pem",
        "azul/p521-ecdsa-intermediate-cert.pem",
    ]);
    // A root of the P-521 root's name with another (cheap) key: it did not sign the
    // intermediate.
    let rsa_root = cert("azul/sha1-rsa-root-ca-cert.pem");
    let rsa_spki = Cert::parse(&rsa_root).unwrap().spki.to_vec();
    let impostor = with_spki(&cert("azul/p521-ecdsa-root-ca-cert.pem"), &rsa_spki);
    let (roots, warnings) = Roots::from_pem(pem_of(&impostor).as_bytes());
    assert!(warnings.is_empty(), "{warnings:?}");
    let e = validate_if_cheap(&p521, Cert_, &roots, &ChainPolicy::default(), now())
        .expect("refused without a costly check")
        .unwrap_err();
    assert!(matches!(e, ChainError::NoRoot { index: 1, .. }), "{e}");
    assert!(e.to_string().contains("did not sign it"), "{e}");
}

/// #62: a submitted issuer whose key no root program allows (RSA beyond 4096 bits, an
/// exponent beyond 32 bits or even, an EC curve other than P-256/384/521) is refused
/// before any signature is checked.
#[test]
fn issuer_keys_beyond_the_root_programs_are_refused_before_any_signature() {
    LEAF_CACHE_OFF.set(true);
    let roots = azul_roots();
    let c = chain(&[A_LEAF, A_INT]);
    let e33 = [0x01, 0xff, 0xff, 0xff, 0xff];
    for (spki, why) in [
        (rsa_spki(8192, &[0x01, 0x00, 0x01]), "8192 bits"),
        (rsa_spki(2048, &e33), "33 bits"),
        (rsa_spki(2048, &[0x01, 0x00, 0x00]), "even"),
    ] {
        let mut bad = c.clone();
        bad[1] = with_spki(&c[1], &spki);
        let e = validate_if_cheap(&bad, Cert_, &roots, &ChainPolicy::default(), now())
            .expect("refused without a signature check")
            .unwrap_err();
        assert!(matches!(e, ChainError::IssuerKey { index: 1, .. }), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // P-224 (secp224r1, 1.3.132.0.33).
    let alg = der::wrap(
        der::SEQUENCE,
        &[
            der::wrap(der::OID, &[OID_EC_KEY]),
            der::wrap(der::OID, &[&[0x2b, 0x81, 0x04, 0x00, 0x21][..]]),
        ],
    );
    let point = [&[0u8, 0x04][..], &[7u8; 56][..]].concat();
    let spki = der::wrap(der::SEQUENCE, &[alg, der::wrap(der::BIT_STRING, &[point])]);
    let mut bad = c.clone();
    bad[1] = with_spki(&c[1], &spki);
    let e = err(&bad, Cert_, &roots);
    assert!(matches!(e, ChainError::IssuerKey { index: 1, .. }), "{e}");
    assert!(e.to_string().contains("1.3.132.0.33"), "{e}");
    // The accepted root keys themselves are the operator's: an RSA-4096 root with a
    // usual exponent passes; the check is of submitted issuers only.
    assert!(validate(&c, Cert_, &roots, &ChainPolicy::default(), now()).is_ok());
}

/// #62: a leaf's signature, once verified, is not checked again: the same chain
/// submitted again (retries, replays) costs no signature check, even a costly one.
#[test]
fn a_leaf_verified_once_is_not_checked_again() {
    let p521 = chain(&[
        "azul/p521-ecdsa-leaf-cert.pem",
        "azul/p521-ecdsa-intermediate-cert.pem",
    ]);
    let p521_roots = roots(&["azul/p521-ecdsa-root-ca-cert.pem"]);
    let policy = ChainPolicy::default();
    let first = validate(&p521, Cert_, &p521_roots, &policy, now());
    assert!(first.is_ok());
    let again = validate_if_cheap(&p521, Cert_, &p521_roots, &policy, now())
        .expect("every link was verified before");
    assert_eq!(again, first);
    // A corrupted leaf is not the leaf verified: checked, and refused.
    let mut bad = p521.clone();
    let last = bad[0].len() - 1;
    bad[0][last] ^= 1;
    assert!(validate(&bad, Cert_, &p521_roots, &policy, now()).is_err());
}

/// A logged precertificate entry is checked against the precertificate it keeps
/// (`tlogd migrate`): the TBS and issuer key hash a chain validated to pass; another
/// precertificate, another TBS or another key hash do not. And `issuer_key_hash` is
/// the issuing CA's key for certificates too (the per-issuer rate limit's key).
#[test]
fn logged_precertificates_are_checked_against_their_precertificate() {
    let roots = roots(&[T_ROOT]);
    let c = chain(&[
        "tesseract/test_leaf_pre_cert_signed_by_intermediate.pem",
        T_INT,
    ]);
    let v = ok(&c, Pre, &roots);
    let (ikh, tbs, pre) = precert_parts(&v);
    assert_eq!(v.issuer_key_hash, ikh);
    let issuers: Vec<&[u8]> = v.issuers.iter().map(Vec::as_slice).collect();
    assert_eq!(
        check_logged_precertificate(pre, &issuers, tbs, &ikh),
        Ok(())
    );
    let other = chain(&["tesseract/test_leaf_pre_cert_signed_by_root.pem"]);
    assert!(check_logged_precertificate(&other[0], &issuers, tbs, &ikh).is_err());
    let mut forged = tbs.to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert!(check_logged_precertificate(pre, &issuers, &forged, &ikh).is_err());
    assert!(check_logged_precertificate(pre, &issuers, tbs, &[7; 32]).is_err());
    assert!(check_logged_precertificate(pre, &[], tbs, &ikh).is_err());
    let c = chain(&["tesseract/test_leaf_cert_signed_by_intermediate.pem", T_INT]);
    assert_eq!(ok(&c, Cert_, &roots).issuer_key_hash, spki_hash(&c[1]));
    assert!(check_certificate(&c[1]).is_ok());
    assert!(check_certificate(b"not a certificate").is_err());
}
