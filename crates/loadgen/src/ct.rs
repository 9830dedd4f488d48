//! Certificate Transparency mode (`--ct`): what the loadgen submits to a C2SP
//! static-ct-api log and what it expects back.
//!
//! * Minting: under a root the log trusts (its certificate and key, `--ct-root-cert`,
//!   `--ct-root-key`; [`mint_root`] makes one), one intermediate CA is minted per run,
//!   then a pool of ECDSA P-256 leaves under it, each with a key, serial and subject of
//!   its own; a fraction of them are precertificates (RFC 6962 §3.1 poison extension).
//!   Every chain's request body and the entry the log must store for it are computed
//!   here, before the run's clock starts.
//! * SCTs: [`LogIdentity::check_sct`] checks an `add-chain`/`add-pre-chain` answer: its
//!   `id` is the log's, its signature verifies over the RFC 6962 signature input built
//!   from the chain submitted, and its `leaf_index` extension says where the entry is.
//! * Stored entries: [`expected_leaf`] is the static-ct-api `TileLeaf` the log's data
//!   tile must hold at that index, byte for byte.
//!
//! The entry of a precertificate (its TBSCertificate with the poison removed, and its
//! issuer key hash) comes from `tlogd_ct::chain::validate`, the code a tlogd CT log
//! runs, not a second implementation.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    PKCS_ECDSA_P384_SHA384, PKCS_RSA_SHA256, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};
use tlogd_ct::chain::{ChainKind, ChainPolicy, Roots, validate};
use tlogd_ct::{Submission, SubmittedEntry};
use tlogd_static_ct::leaf::{TileLeaf, TimestampedEntry};
use tlogd_static_ct::sct::{parse_leaf_index, signature_input};
use tlogd_static_ct::signer::LogKey;

/// RFC 6962 §3.1 precertificate poison extension, 1.3.6.1.4.1.11129.2.4.3: critical,
/// its value ASN.1 NULL.
pub const POISON_OID: [u64; 10] = [1, 3, 6, 1, 4, 1, 11129, 2, 4, 3];

/// Chains minted when neither `--ct-chains` nor `--leaf-write-goal` says how many: a
/// few seconds of minting on two cores, ~60 MB; writers then cycle through them.
pub const DEFAULT_POOL: usize = 20_000;

/// Why minting or an SCT check failed.
#[derive(Debug, thiserror::Error)]
pub enum CtError {
    /// The root given cannot be used, or minting failed.
    #[error("{0}")]
    Mint(String),
    /// A file could not be read or written.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        err: std::io::Error,
    },
    /// An `add-chain`/`add-pre-chain` answer that is not a valid SCT for the chain.
    #[error("{0}")]
    Sct(String),
}

fn mint_err(what: &str, e: impl std::fmt::Display) -> CtError {
    CtError::Mint(format!("{what}: {e}"))
}

/// Seconds since the Unix epoch, as the certificates' validity is written.
fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `now + days` as a certificate time.
fn days_from_now(days: i64) -> Result<time::OffsetDateTime, CtError> {
    time::OffsetDateTime::from_unix_timestamp(now_unix() + days * 86_400)
        .map_err(|e| mint_err("validity", e))
}

fn ca_params(dn: DistinguishedName, constraint: BasicConstraints) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(constraint);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

/// A root certificate and its private key, as PEM.
#[derive(Clone, Debug)]
pub struct RootPem {
    /// The certificate (`CERTIFICATE`).
    pub cert_pem: String,
    /// The ECDSA P-256 key (PKCS#8 `PRIVATE KEY`).
    pub key_pem: String,
}

/// Mint a self-signed ECDSA P-256 root CA for a test log's roots file: its subject
/// names `tag`, so roots minted for different logs differ.
pub fn mint_root(tag: &str) -> Result<RootPem, CtError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| mint_err("key", e))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "tlog-loadgen");
    dn.push(DnType::CommonName, format!("tlog-loadgen test root {tag}"));
    let mut p = ca_params(dn, BasicConstraints::Unconstrained);
    p.not_before = days_from_now(-1)?;
    p.not_after = days_from_now(3650)?;
    p.serial_number = Some(SerialNumber::from_slice(&serial(0x4000, now_unix() as u64)));
    let cert = p.self_signed(&key).map_err(|e| mint_err("root", e))?;
    Ok(RootPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// [`mint_root`], written to `cert` and `key` (the key with mode 0600; neither file
/// may exist already).
pub fn write_root(cert: &Path, key: &Path) -> Result<RootPem, CtError> {
    let root = mint_root(&format!("{:x}", now_unix()))?;
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |err| CtError::Io { path, err }
    };
    write_new(key, root.key_pem.as_bytes(), 0o600).map_err(io(key))?;
    write_new(cert, root.cert_pem.as_bytes(), 0o644).map_err(io(cert))?;
    Ok(root)
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// A CA the loadgen issues certificates with.
pub struct Issuer {
    /// rcgen's view, for `signed_by`: the subject and key identifier it writes into
    /// what this CA issues (its DER is not this CA's when the CA was loaded).
    cert: rcgen::Certificate,
    key: KeyPair,
    /// The CA's certificate as the log receives it.
    der: Vec<u8>,
}

impl Issuer {
    /// The CA's certificate (DER).
    pub fn der(&self) -> &[u8] {
        &self.der
    }
}

/// The first PEM `CERTIFICATE` block of `pem`, as DER.
fn cert_der(pem: &str) -> Result<Vec<u8>, CtError> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| mint_err("root certificate: not a PEM certificate", e))?;
    if block.label != "CERTIFICATE" {
        return Err(CtError::Mint(format!(
            "root certificate: a PEM {:?} block, not CERTIFICATE",
            block.label
        )));
    }
    Ok(block.contents)
}

/// A subject rcgen writes back byte for byte: each RDN one attribute, each a
/// PrintableString, UTF8String or IA5String, no attribute type twice (what rcgen's
/// `DistinguishedName` holds). Whether it really does is checked on the intermediate.
fn rcgen_dn(name: &x509_parser::x509::X509Name<'_>) -> Result<DistinguishedName, CtError> {
    use x509_parser::der_parser::asn1_rs::Tag;
    let mut dn = DistinguishedName::new();
    for rdn in name.iter_rdn() {
        let mut attrs = rdn.iter();
        let (Some(a), None) = (attrs.next(), attrs.next()) else {
            return Err(CtError::Mint(
                "root certificate: a multi-valued RDN in its subject".into(),
            ));
        };
        let oid: Vec<u64> = a
            .attr_type()
            .iter()
            .ok_or_else(|| CtError::Mint("root certificate: an unreadable attribute type".into()))?
            .collect();
        let text = a
            .as_str()
            .map_err(|e| mint_err("root certificate: subject", e))?;
        let value = match a.attr_value().tag() {
            Tag::PrintableString => DnValue::PrintableString(
                text.try_into()
                    .map_err(|e| mint_err("root certificate: subject", e))?,
            ),
            Tag::Ia5String => DnValue::Ia5String(
                text.try_into()
                    .map_err(|e| mint_err("root certificate: subject", e))?,
            ),
            Tag::Utf8String => DnValue::Utf8String(text.to_string()),
            t => {
                return Err(CtError::Mint(format!(
                    "root certificate: a subject attribute of ASN.1 type {t}, which cannot be reproduced"
                )));
            }
        };
        let ty = DnType::from_oid(&oid);
        if dn.get(&ty).is_some() {
            return Err(CtError::Mint(
                "root certificate: an attribute type twice in its subject".into(),
            ));
        }
        dn.push(ty, value);
    }
    Ok(dn)
}

/// Load a root CA: its certificate and its ECDSA P-256 private key (PKCS#8 or SEC 1),
/// which must be the certificate's.
pub fn load_root(cert_pem: &str, key_pem: &str) -> Result<Issuer, CtError> {
    let der = cert_der(cert_pem)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| mint_err("root certificate does not parse", e))?;
    // rcgen's ring backend reads PKCS#8 only; a SEC 1 key goes through LogKey.
    let pkcs8 = LogKey::from_pem(key_pem)
        .and_then(|k| k.to_pkcs8_pem())
        .map_err(|e| mint_err("root key", e))?;
    let key = KeyPair::from_pem(&pkcs8).map_err(|e| mint_err("root key", e))?;
    if key.public_key_der() != parsed.public_key().raw {
        return Err(CtError::Mint(
            "root key: not the key of the root certificate".into(),
        ));
    }
    let dn = rcgen_dn(parsed.subject())?;
    let cert = ca_params(dn, BasicConstraints::Unconstrained)
        .self_signed(&key)
        .map_err(|e| mint_err("root", e))?;
    Ok(Issuer { cert, key, der })
}

/// A 16-byte serial: positive, never zero, distinct per (`kind`, `n`).
fn serial(kind: u64, n: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&(kind | 0x1000_0000_0000_0000).to_be_bytes());
    s[8..].copy_from_slice(&n.to_be_bytes());
    s[0] &= 0x7f;
    s
}

/// The intermediate's key, which signs every leaf: what the log verifies on each add.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum IssuerKey {
    /// ECDSA P-256, leaves signed ecdsa-with-SHA256 (Let's Encrypt's E-series are P-384).
    #[default]
    P256,
    /// ECDSA P-384, leaves signed ecdsa-with-SHA384 (Let's Encrypt's E5 to E9).
    P384,
    /// RSA-2048, leaves signed sha256WithRSAEncryption (as TesseraCT's CT hammer's
    /// intermediate, and most of the Web PKI). One fixed test key (ring cannot make RSA
    /// keys): it signs only under the run's own root.
    Rsa2048,
}

/// The fixed RSA-2048 test key of [`IssuerKey::Rsa2048`] (PKCS#8).
const TEST_RSA_2048_KEY: &str = include_str!("ct-issuer-rsa-2048.pem");

impl IssuerKey {
    fn key_pair(self) -> Result<KeyPair, CtError> {
        match self {
            IssuerKey::P256 => KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256),
            IssuerKey::P384 => KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384),
            IssuerKey::Rsa2048 => {
                KeyPair::from_pem_and_sign_algo(TEST_RSA_2048_KEY, &PKCS_RSA_SHA256)
            }
        }
        .map_err(|e| mint_err("intermediate key", e))
    }
}

/// Mint the run's intermediate CA under `root`, with a key of `key`'s kind; `tag` goes
/// into its subject. Checks that its issuer is byte for byte the root's subject (a
/// loaded root's subject is re-encoded by rcgen).
pub fn mint_intermediate(root: &Issuer, tag: u64, key: IssuerKey) -> Result<Issuer, CtError> {
    let key = key.key_pair()?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "tlog-loadgen");
    dn.push(
        DnType::CommonName,
        format!("tlog-loadgen intermediate {tag:016x}"),
    );
    let mut p = ca_params(dn, BasicConstraints::Constrained(0));
    p.not_before = days_from_now(-1)?;
    p.not_after = days_from_now(1825)?;
    p.serial_number = Some(SerialNumber::from_slice(&serial(0x2000, tag)));
    let cert = p
        .signed_by(&key, &root.cert, &root.key)
        .map_err(|e| mint_err("intermediate", e))?;
    let der = cert.der().to_vec();
    let (_, root_parsed) = x509_parser::parse_x509_certificate(&root.der)
        .map_err(|e| mint_err("root certificate does not parse", e))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| mint_err("intermediate does not parse", e))?;
    if parsed.issuer().as_raw() != root_parsed.subject().as_raw() {
        return Err(CtError::Mint(
            "the root's subject cannot be written back byte for byte by rcgen: give a root minted by `tlog-loadgen ct-root`"
                .into(),
        ));
    }
    Ok(Issuer { cert, key, der })
}

/// What a minted chain's leaf is, as a CT log under load may rank it (#60): the mix of
/// `--ct-precert-chance`, `--ct-scts-chance` and `--ct-old-chance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainClass {
    /// A fresh precertificate (to `add-pre-chain`).
    Precertificate,
    /// A fresh final certificate.
    Fresh,
    /// A final certificate carrying an embedded SCT list (logged elsewhere already).
    WithScts,
    /// A final certificate issued 400 days ago.
    Old,
}

impl ChainClass {
    /// Every class, in report order.
    pub const ALL: [ChainClass; 4] = [
        ChainClass::Precertificate,
        ChainClass::Fresh,
        ChainClass::WithScts,
        ChainClass::Old,
    ];

    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            ChainClass::Precertificate => "precertificate",
            ChainClass::Fresh => "fresh",
            ChainClass::WithScts => "with-scts",
            ChainClass::Old => "old",
        }
    }

    /// Its position in [`ChainClass::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The fractions of the pool minted as each class but [`ChainClass::Fresh`] (the rest).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mix {
    /// Precertificates.
    pub precert: f64,
    /// Final certificates carrying SCTs.
    pub scts: f64,
    /// Old final certificates.
    pub old: f64,
}

/// RFC 6962 §3.3 embedded SCT list, 1.3.6.1.4.1.11129.2.4.2.
const SCT_LIST_OID: [u64; 10] = [1, 3, 6, 1, 4, 1, 11129, 2, 4, 2];

/// One chain to submit, and what the log must log for it.
#[derive(Clone, Debug)]
pub struct MintedChain {
    /// The request body: `{"chain":[leaf, intermediate, root]}`, base64 DER.
    pub body: Bytes,
    /// Sent to `add-pre-chain` (a precertificate) rather than `add-chain`.
    pub precert: bool,
    /// What its leaf is.
    pub class: ChainClass,
    /// The entry to log (certificate, or the precertificate's TBS and issuer key hash,
    /// and the precertificate) and the fingerprints of the chain after the leaf.
    pub submission: Submission,
}

impl MintedChain {
    /// The endpoint, relative to the log's submission prefix.
    pub fn path(&self) -> &'static str {
        if self.precert {
            "ct/v1/add-pre-chain"
        } else {
            "ct/v1/add-chain"
        }
    }
}

/// What every chain of a run shares: the root, the intermediate, the roots a
/// precertificate's entry is computed against.
pub struct Minter {
    root: Arc<Issuer>,
    intermediate: Issuer,
    roots: Roots,
    /// Fingerprints of the intermediate and the root (the TileLeaf's chain).
    fingerprints: Vec<[u8; 32]>,
    tag: u64,
}

impl Minter {
    /// Mint the run's intermediate under `root` with a `key`; `tag` keeps this run's
    /// names apart.
    pub fn new(root: Arc<Issuer>, tag: u64, key: IssuerKey) -> Result<Self, CtError> {
        let intermediate = mint_intermediate(&root, tag, key)?;
        let root_pem = pem_cert(&root.der);
        let (roots, problems) = Roots::from_pem(root_pem.as_bytes());
        if roots.is_empty() {
            return Err(CtError::Mint(format!(
                "the root does not load as a log's root: {problems:?}"
            )));
        }
        let fingerprints = vec![
            Sha256::digest(&intermediate.der).into(),
            Sha256::digest(&root.der).into(),
        ];
        Ok(Minter {
            root,
            intermediate,
            roots,
            fingerprints,
            tag,
        })
    }

    /// The intermediate CA.
    pub fn intermediate(&self) -> &Issuer {
        &self.intermediate
    }

    /// Just the leaf `n` (DER) of `class`.
    pub fn leaf(&self, n: u64, class: ChainClass) -> Result<Vec<u8>, CtError> {
        let precert = class == ChainClass::Precertificate;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| mint_err("key", e))?;
        let host = format!("leaf-{n}.run-{:016x}.tlog-loadgen.invalid", self.tag);
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.clone());
        p.distinguished_name = dn;
        p.subject_alt_names = vec![SanType::DnsName(
            host.try_into().map_err(|e| mint_err("leaf name", e))?,
        )];
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.not_before = days_from_now(if class == ChainClass::Old { -400 } else { -1 })?;
        p.not_after = days_from_now(90)?;
        p.serial_number = Some(SerialNumber::from_slice(&serial(self.tag, n)));
        if class == ChainClass::WithScts {
            // An SCT list the log only sees, never reads: an empty list's two bytes.
            p.custom_extensions.push(CustomExtension::from_oid_content(
                &SCT_LIST_OID,
                vec![0x04, 0x02, 0x00, 0x00],
            ));
        }
        p.use_authority_key_identifier_extension = true;
        if precert {
            let mut poison = CustomExtension::from_oid_content(&POISON_OID, vec![0x05, 0x00]);
            poison.set_criticality(true);
            p.custom_extensions.push(poison);
        }
        let cert = p
            .signed_by(&key, &self.intermediate.cert, &self.intermediate.key)
            .map_err(|e| mint_err("leaf", e))?;
        Ok(cert.der().to_vec())
    }

    /// Chain `n`: the leaf, the intermediate and the root, the request body and the
    /// entry the log must store for it.
    pub fn chain(&self, n: u64, class: ChainClass) -> Result<MintedChain, CtError> {
        let precert = class == ChainClass::Precertificate;
        let leaf = self.leaf(n, class)?;
        let chain = [leaf, self.intermediate.der.clone(), self.root.der.clone()];
        let body = format!(
            "{{\"chain\":[\"{}\",\"{}\",\"{}\"]}}",
            B64.encode(&chain[0]),
            B64.encode(&chain[1]),
            B64.encode(&chain[2])
        );
        let submission = if precert {
            // The TBSCertificate without the poison, cut as a tlogd CT log cuts it.
            validate(
                &chain,
                ChainKind::Precertificate,
                &self.roots,
                &ChainPolicy::default(),
                now_unix() as u64 * 1000,
            )
            .map_err(|e| mint_err(&format!("precertificate {n} does not validate"), e))?
            .submission
        } else {
            let [leaf, ..] = chain;
            Submission {
                entry: SubmittedEntry::Certificate { der: leaf },
                chain: self.fingerprints.clone(),
            }
        };
        Ok(MintedChain {
            body: Bytes::from(body),
            precert,
            class,
            submission,
        })
    }
}

/// `der` as a PEM certificate.
pub fn pem_cert(der: &[u8]) -> String {
    tlogd_ct::chain::certificate_pem(der)
}

/// The class of chain `n` of a run seeded with `seed` (deterministic, so any chunk of
/// the pool can be minted anywhere): bands of one uniform draw.
fn class_of(seed: u64, n: u64, mix: &Mix) -> ChainClass {
    let mut z = (seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x632b_e59b_d9b4_e019);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let u = (z >> 11) as f64 / ((1u64 << 53) as f64);
    if u < mix.precert {
        ChainClass::Precertificate
    } else if u < mix.precert + mix.scts {
        ChainClass::WithScts
    } else if u < mix.precert + mix.scts + mix.old {
        ChainClass::Old
    } else {
        ChainClass::Fresh
    }
}

/// Mint `n` chains in the proportions of `mix`, on blocking threads (one chunk per
/// core).
pub async fn mint_pool(
    minter: Arc<Minter>,
    n: usize,
    mix: Mix,
) -> Result<Vec<MintedChain>, CtError> {
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get());
    let per = n.div_ceil(cores).max(1);
    let mut jobs = Vec::new();
    for start in (0..n).step_by(per) {
        let end = (start + per).min(n);
        let m = minter.clone();
        jobs.push(tokio::task::spawn_blocking(move || {
            (start..end)
                .map(|i| m.chain(i as u64, class_of(m.tag, i as u64, &mix)))
                .collect::<Result<Vec<_>, _>>()
        }));
    }
    let mut pool = Vec::with_capacity(n);
    for j in jobs {
        pool.extend(j.await.map_err(|e| mint_err("minting", e))??);
    }
    Ok(pool)
}

/// A CT log's key, as `--log-public-key` gives it: base64 DER SubjectPublicKeyInfo.
#[derive(Clone, Debug)]
pub struct LogIdentity {
    /// The DER SubjectPublicKeyInfo.
    pub spki: Vec<u8>,
    /// RFC 6962 `LogID`: its SHA-256.
    pub log_id: [u8; 32],
    /// The key, parsed once: every SCT is checked.
    verifier: tlogd_static_ct::signer::LogVerifier,
}

/// An SCT, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedSct {
    /// The entry's index (its `leaf_index` extension).
    pub index: u64,
    /// When the log says it logged the entry.
    pub timestamp: u64,
    /// The SCT's extensions as signed.
    pub extensions: Vec<u8>,
}

/// An SCT read from an answer whose signature is not checked yet
/// ([`LogIdentity::read_sct`]).
#[derive(Clone, Debug)]
pub struct UncheckedSct {
    /// Its fields, all checked but the signature.
    pub fields: CheckedSct,
    /// The `DigitallySigned` struct.
    signature: Vec<u8>,
}

/// When the SCTs' signatures are checked (`--ct-sct-checks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SctChecks {
    /// As each answer arrives, on the writer (ECDSA P-256, ~50 µs each: on the log's
    /// machine, taken from the log's cores while it is measured).
    During,
    /// Once writing stops, before the report: each answer is read and its fields
    /// checked at once, its signature kept for later (~200 bytes), up to
    /// [`MAX_DEFERRED_SCTS`], past which the rest are checked as they arrive.
    #[default]
    After,
}

/// The most SCTs whose signature check `--ct-sct-checks after` defers (~200 MB).
pub const MAX_DEFERRED_SCTS: usize = 1 << 20;

/// The JSON of an `add-chain` answer (RFC 6962 §4.1).
#[derive(serde::Deserialize)]
struct SctJson {
    sct_version: u8,
    id: String,
    timestamp: u64,
    extensions: String,
    signature: String,
}

fn sct_err(why: impl Into<String>) -> CtError {
    CtError::Sct(why.into())
}

impl LogIdentity {
    /// The log whose key is the base64 DER SubjectPublicKeyInfo `b64` (an ECDSA P-256
    /// key, as static-ct-api logs have).
    pub fn from_base64(b64: &str) -> Result<Self, CtError> {
        let spki = B64
            .decode(b64.trim())
            .map_err(|e| mint_err("--log-public-key: not base64", e))?;
        tlogd_static_ct::signer::check_public_key(&spki)
            .map_err(|e| mint_err("--log-public-key", e))?;
        let verifier = tlogd_static_ct::signer::LogVerifier::new(&spki)
            .map_err(|e| mint_err("--log-public-key", e))?;
        let log_id = Sha256::digest(&spki).into();
        Ok(LogIdentity {
            spki,
            log_id,
            verifier,
        })
    }

    /// Check the answer `body` to submitting `chain`: a v1 SCT from this log whose
    /// signature verifies over the entry of `chain` at its timestamp and extensions,
    /// which hold the static-ct-api `leaf_index`. Returns it.
    pub fn check_sct(&self, chain: &MintedChain, body: &[u8]) -> Result<CheckedSct, CtError> {
        let sct = self.read_sct(body)?;
        self.check_signature(chain, &sct)?;
        Ok(sct.fields)
    }

    /// [`LogIdentity::check_sct`] but for the signature: a v1 SCT from this log whose
    /// extensions hold the static-ct-api `leaf_index`. Its signature is checked later
    /// with [`LogIdentity::check_signature`] (`--ct-sct-checks after`).
    pub fn read_sct(&self, body: &[u8]) -> Result<UncheckedSct, CtError> {
        let j: SctJson = serde_json::from_slice(body)
            .map_err(|e| sct_err(format!("the answer is not an SCT: {e}")))?;
        if j.sct_version != 0 {
            return Err(sct_err(format!(
                "sct_version {}, not v1 (0)",
                j.sct_version
            )));
        }
        let b64 = |what: &str, s: &str| {
            B64.decode(s)
                .map_err(|e| sct_err(format!("{what}: not base64: {e}")))
        };
        if b64("id", &j.id)? != self.log_id {
            return Err(sct_err(
                "its id is not the log's (SHA-256 of --log-public-key)",
            ));
        }
        let extensions = b64("extensions", &j.extensions)?;
        let index = parse_leaf_index(&extensions)
            .map_err(|e| sct_err(e.to_string()))?
            .ok_or_else(|| sct_err("no leaf_index extension (static-ct-api)"))?;
        let signature = b64("signature", &j.signature)?;
        Ok(UncheckedSct {
            fields: CheckedSct {
                index,
                timestamp: j.timestamp,
                extensions,
            },
            signature,
        })
    }

    /// Check that `sct`'s signature verifies over the entry of `chain` at its
    /// timestamp and extensions.
    pub fn check_signature(&self, chain: &MintedChain, sct: &UncheckedSct) -> Result<(), CtError> {
        let f = &sct.fields;
        let te = timestamped_entry(chain, f.timestamp, f.extensions.clone());
        let rest = self
            .verifier
            .verify(&signature_input(&te), &sct.signature)
            .map_err(|e| {
                sct_err(format!(
                    "its signature does not verify over the entry submitted: {e}"
                ))
            })?;
        if !rest.is_empty() {
            return Err(sct_err("trailing bytes after the signature"));
        }
        Ok(())
    }
}

/// The `TimestampedEntry` of `chain` at `timestamp` with `extensions`: what its SCT
/// signs and its leaf hashes.
fn timestamped_entry(chain: &MintedChain, timestamp: u64, extensions: Vec<u8>) -> TimestampedEntry {
    // `tlogd_ct::sct::timestamped_entry` writes the leaf_index itself; the SCT's own
    // extensions are what was signed, so they are taken as the SCT gives them.
    let mut te = tlogd_ct::sct::timestamped_entry(&chain.submission, 0, timestamp);
    te.extensions = extensions;
    te
}

/// The static-ct-api `TileLeaf` the log's data tile must hold for `chain` logged as
/// `sct` says: the entry at the SCT's timestamp with its extensions, the
/// precertificate, the fingerprints of the chain after the leaf (the root included).
pub fn expected_leaf(chain: &MintedChain, sct: &CheckedSct) -> Vec<u8> {
    let (_, pre_certificate) = chain.submission.log_entry();
    let leaf = TileLeaf {
        timestamped_entry: timestamped_entry(chain, sct.timestamp, sct.extensions.clone()),
        pre_certificate,
        certificate_chain: chain.submission.chain.clone(),
    };
    let mut out = Vec::with_capacity(chain.body.len());
    leaf.encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use tlogd_static_ct::leaf::LogEntry;
    use tlogd_static_ct::sct::leaf_index_extension;

    use super::*;

    fn minter() -> (RootPem, Minter) {
        let root = mint_root("unit").unwrap();
        let issuer = Arc::new(load_root(&root.cert_pem, &root.key_pem).unwrap());
        (root, Minter::new(issuer, 7, IssuerKey::P256).unwrap())
    }

    fn chain_of(m: &Minter, c: &MintedChain) -> Vec<Vec<u8>> {
        let v: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
        let chain: Vec<Vec<u8>> = v["chain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| B64.decode(s.as_str().unwrap()).unwrap())
            .collect();
        assert_eq!(chain[1], m.intermediate().der());
        chain
    }

    /// A minted chain validates as a tlogd CT log validates it, against the minted root
    /// alone; the entry the loadgen expects is the one the log would queue.
    #[test]
    fn minted_chains_validate_against_the_minted_root() {
        let (root, m) = minter();
        let (roots, problems) = Roots::from_pem(root.cert_pem.as_bytes());
        assert!(problems.is_empty() && roots.len() == 1, "{problems:?}");
        let now = now_unix() as u64 * 1000;
        // Under every kind of intermediate key, both kinds of leaf validate, and a
        // leaf with a bit of its signature flipped does not.
        let issuer = Arc::new(load_root(&root.cert_pem, &root.key_pem).unwrap());
        for key in [IssuerKey::P256, IssuerKey::P384, IssuerKey::Rsa2048] {
            let m = Minter::new(issuer.clone(), 8, key).unwrap();
            for (n, precert) in [(1, false), (2, true)] {
                let c = m.chain(n, cls(precert)).unwrap();
                let mut chain = chain_of(&m, &c);
                let kind = if precert {
                    ChainKind::Precertificate
                } else {
                    ChainKind::Certificate
                };
                let v = validate(&chain, kind, &roots, &ChainPolicy::default(), now)
                    .unwrap_or_else(|e| panic!("{key:?}: {e}"));
                assert_eq!(v.submission, c.submission, "{key:?}");
                *chain[0].last_mut().unwrap() ^= 1;
                assert!(
                    validate(&chain, kind, &roots, &ChainPolicy::default(), now).is_err(),
                    "{key:?}"
                );
            }
        }
        for (n, precert) in [(1, false), (2, true), (3, false)] {
            let c = m.chain(n, cls(precert)).unwrap();
            assert_eq!(c.precert, precert);
            let chain = chain_of(&m, &c);
            let kind = if precert {
                ChainKind::Precertificate
            } else {
                ChainKind::Certificate
            };
            let v = validate(&chain, kind, &roots, &ChainPolicy::default(), now).unwrap();
            assert_eq!(v.submission, c.submission);
            assert_eq!(v.issuers, chain[1..].to_vec());
            // The wrong endpoint is refused: the poison is what tells them apart.
            let other = if precert {
                ChainKind::Certificate
            } else {
                ChainKind::Precertificate
            };
            assert!(validate(&chain, other, &roots, &ChainPolicy::default(), now).is_err());
        }
        // Another root does not anchor them.
        let (stranger, _) = Roots::from_pem(mint_root("other").unwrap().cert_pem.as_bytes());
        let chain = chain_of(&m, &m.chain(4, ChainClass::Fresh).unwrap());
        let short = &chain[..2];
        assert!(
            validate(
                short,
                ChainKind::Certificate,
                &stranger,
                &ChainPolicy::default(),
                now
            )
            .is_err()
        );
        // Leaves are distinct: serial, subject and key.
        assert_ne!(
            m.leaf(5, ChainClass::Fresh).unwrap(),
            m.leaf(6, ChainClass::Fresh).unwrap()
        );
    }

    /// A precertificate carries the poison extension, critical, its value ASN.1 NULL;
    /// the entry logged for it is its TBSCertificate without the poison, under the
    /// intermediate's key.
    #[test]
    fn a_precertificate_is_poisoned_critical_null() {
        let (_, m) = minter();
        let leaf = m.leaf(9, ChainClass::Precertificate).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        let poison: Vec<_> = cert
            .extensions()
            .iter()
            .filter(|e| e.oid.to_id_string() == "1.3.6.1.4.1.11129.2.4.3")
            .collect();
        assert_eq!(poison.len(), 1);
        assert!(poison[0].critical);
        assert_eq!(poison[0].value, [0x05, 0x00]);
        let plain = m.leaf(10, ChainClass::Fresh).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&plain).unwrap();
        assert!(
            cert.extensions()
                .iter()
                .all(|e| e.oid.to_id_string() != "1.3.6.1.4.1.11129.2.4.3")
        );
        let c = m.chain(11, ChainClass::Precertificate).unwrap();
        let (_, inter) = x509_parser::parse_x509_certificate(m.intermediate().der()).unwrap();
        let want: [u8; 32] = Sha256::digest(inter.public_key().raw).into();
        match &c.submission.entry {
            SubmittedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate,
                pre_certificate,
            } => {
                assert_eq!(*issuer_key_hash, want);
                assert!(tbs_certificate.len() < pre_certificate.len());
                let oid_der = [
                    0x06, 0x0a, 0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x03,
                ];
                let has = |b: &[u8]| b.windows(oid_der.len()).any(|w| w == oid_der);
                assert!(has(pre_certificate) && !has(tbs_certificate));
            }
            e => panic!("not a precertificate entry: {e:?}"),
        }
        // The pool mints about the fractions asked of each class.
        let mix = Mix {
            precert: 0.1,
            scts: 0.6,
            old: 0.2,
        };
        let count = |class| (0..1000).filter(|&i| class_of(3, i, &mix) == class).count();
        for (class, around) in [
            (ChainClass::Precertificate, 100),
            (ChainClass::WithScts, 600),
            (ChainClass::Old, 200),
            (ChainClass::Fresh, 100),
        ] {
            let n = count(class);
            assert!(n.abs_diff(around) < 60, "{class:?}: {n}");
        }
        assert_eq!(
            (0..100)
                .filter(|&i| class_of(3, i, &Mix::default()) != ChainClass::Fresh)
                .count(),
            0
        );
        // A certificate with SCTs carries the list; an old one was issued long ago.
        let der = m.leaf(30, ChainClass::WithScts).unwrap();
        let (_, with) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(
            with.extensions()
                .iter()
                .any(|e| e.oid.to_id_string() == "1.3.6.1.4.1.11129.2.4.2")
        );
        let der = m.leaf(31, ChainClass::Old).unwrap();
        let (_, old) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(old.validity().not_before.timestamp() < now_unix() - 300 * 86_400);
    }

    fn cls(precert: bool) -> ChainClass {
        if precert {
            ChainClass::Precertificate
        } else {
            ChainClass::Fresh
        }
    }

    /// An SCT signed over the chain's entry checks; one from another key, over another
    /// entry, or without its leaf_index does not. The expected TileLeaf hashes as the
    /// SCT's entry.
    #[test]
    fn scts_are_checked_against_the_chain_submitted() {
        let (_, m) = minter();
        let key = LogKey::from_scalar(&Sha256::digest(b"loadgen sct test")).unwrap();
        let log = LogIdentity::from_base64(&B64.encode(key.public_key_der())).unwrap();
        let sct_for = |c: &MintedChain, index: u64, key: &LogKey| {
            let te = tlogd_ct::sct::timestamped_entry(&c.submission, index, 1234);
            tlogd_ct::sct::SignedCertificateTimestamp::sign(key, &te).to_json()
        };
        for precert in [false, true] {
            let c = m.chain(20, cls(precert)).unwrap();
            let got = log.check_sct(&c, sct_for(&c, 42, &key).as_bytes()).unwrap();
            assert_eq!(got.index, 42);
            assert_eq!(got.extensions, leaf_index_extension(42));
            let leaf = expected_leaf(&c, &got);
            let parsed = tlogd_static_ct::parse_data_tile(&leaf).unwrap();
            assert_eq!(parsed.len(), 1);
            assert_eq!(parsed[0].certificate_chain.len(), 2);
            assert_eq!(
                matches!(parsed[0].timestamped_entry.entry, LogEntry::Precert { .. }),
                precert
            );
            // Another chain's SCT does not verify over this chain.
            let other = m.chain(21, cls(precert)).unwrap();
            let e = log
                .check_sct(&c, sct_for(&other, 42, &key).as_bytes())
                .unwrap_err();
            assert!(e.to_string().contains("does not verify"), "{e}");
            // Another log's SCT is not this log's.
            let stranger = LogKey::from_scalar(&Sha256::digest(b"another log")).unwrap();
            let e = log
                .check_sct(&c, sct_for(&c, 42, &stranger).as_bytes())
                .unwrap_err();
            assert!(e.to_string().contains("id"), "{e}");
        }
        let c = m.chain(22, ChainClass::Fresh).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&sct_for(&c, 1, &key)).unwrap();
        v["extensions"] = "".into();
        assert!(log.check_sct(&c, v.to_string().as_bytes()).is_err());
        assert!(log.check_sct(&c, b"not json").is_err());
    }

    /// A SEC 1 root key loads as well as a PKCS#8 one; a key that is not the root's is
    /// refused.
    #[test]
    fn roots_load_with_their_own_key_only() {
        let root = mint_root("keys").unwrap();
        let sec1 = {
            use p256::pkcs8::DecodePrivateKey;
            let k = p256::SecretKey::from_pkcs8_pem(&root.key_pem).unwrap();
            k.to_sec1_pem(p256::pkcs8::LineEnding::LF)
                .unwrap()
                .to_string()
        };
        let issuer = load_root(&root.cert_pem, &sec1).unwrap();
        for key in [IssuerKey::P256, IssuerKey::P384, IssuerKey::Rsa2048] {
            assert!(mint_intermediate(&issuer, 1, key).is_ok(), "{key:?}");
        }
        let other = mint_root("keys2").unwrap();
        let e = load_root(&root.cert_pem, &other.key_pem).err().unwrap();
        assert!(e.to_string().contains("not the key"), "{e}");
    }
}
