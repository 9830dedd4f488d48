//! Signature verification along a chain: the algorithms a certificate may name (RSA
//! PKCS#1 v1.5 and PSS, ECDSA P-256/P-384/P-521, Ed25519), their hashes, and the fast
//! paths (aws-lc-rs) for the common keys; a CA's verified signatures are remembered.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hash {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    /// The digest's length in bytes.
    pub(super) fn len(self) -> usize {
        match self {
            Hash::Sha1 => 20,
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
            Hash::Sha512 => 64,
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha1 => Sha1::digest(data).to_vec(),
            Hash::Sha256 => Sha256::digest(data).to_vec(),
            Hash::Sha384 => Sha384::digest(data).to_vec(),
            Hash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SigAlg {
    RsaPkcs1(Hash),
    RsaPss(Hash),
    Ecdsa(Hash),
    Ed25519,
}

/// Why a signature was not accepted.
#[derive(Debug)]
pub(super) enum VerifyError {
    /// An algorithm this log does not verify (its name).
    Unsupported(String),
    /// The signature or the key is bad.
    Invalid(String),
}

pub(super) fn invalid(why: impl fmt::Display) -> VerifyError {
    VerifyError::Invalid(why.to_string())
}

pub(super) fn signature_algorithm(alg: &Tlv<'_>) -> Result<SigAlg, VerifyError> {
    let mut r = Reader::new(alg.value);
    let oid = r
        .expect(der::OID, "no algorithm OID")
        .map_err(|e| VerifyError::Unsupported(format!("a malformed algorithm identifier ({e})")))?;
    // Parameters are not checked (NULL or absent for RSA, absent for ECDSA): Go
    // identifies these algorithms by OID alone, except Ed25519 (RFC 8410 §3).
    Ok(match oid.value {
        OID_RSA_SHA1 => SigAlg::RsaPkcs1(Hash::Sha1),
        OID_RSA_SHA256 => SigAlg::RsaPkcs1(Hash::Sha256),
        OID_RSA_SHA384 => SigAlg::RsaPkcs1(Hash::Sha384),
        OID_RSA_SHA512 => SigAlg::RsaPkcs1(Hash::Sha512),
        OID_ECDSA_SHA1 => SigAlg::Ecdsa(Hash::Sha1),
        OID_ECDSA_SHA256 => SigAlg::Ecdsa(Hash::Sha256),
        OID_ECDSA_SHA384 => SigAlg::Ecdsa(Hash::Sha384),
        OID_ECDSA_SHA512 => SigAlg::Ecdsa(Hash::Sha512),
        OID_RSA_PSS => match r.next_tlv().ok().flatten().and_then(pss_hash) {
            Some(hash) if r.is_empty() => SigAlg::RsaPss(hash),
            _ => return Err(VerifyError::Unsupported(unsupported_name(oid.value))),
        },
        OID_ED25519 if r.is_empty() => SigAlg::Ed25519,
        OID_ED25519 => return Err(VerifyError::Unsupported("Ed25519 with parameters".into())),
        other => return Err(VerifyError::Unsupported(unsupported_name(other))),
    })
}

pub(super) fn unsupported_name(oid: &[u8]) -> String {
    let dotted = oid_name(oid);
    KNOWN_UNSUPPORTED
        .iter()
        .find(|(o, _)| *o == dotted)
        .map_or(dotted.clone(), |(_, n)| format!("{n} ({dotted})"))
}

/// The hash of RSASSA-PSS parameters (RFC 4055 §3.1) in the three forms Go's x509
/// accepts, the ones CAs use: SHA-256, SHA-384 or SHA-512, MGF1 with the same hash, a
/// salt as long as the hash, the default trailer field.
pub(super) fn pss_hash(params: Tlv<'_>) -> Option<Hash> {
    if params.tag != der::SEQUENCE {
        return None;
    }
    let mut r = Reader::new(params.value);
    let hash_ai = r.optional(0xa0).ok()??;
    let mgf_ai = r.optional(0xa1).ok()??;
    let salt = r.optional(0xa2).ok()??;
    let trailer = r.optional(0xa3).ok()?;
    if !r.is_empty() {
        return None;
    }
    let hash = digest_algorithm(der::read_exact(hash_ai.value, der::SEQUENCE).ok()?)?;
    let mgf = der::read_exact(mgf_ai.value, der::SEQUENCE).ok()?;
    let mut mr = Reader::new(mgf.value);
    if mr.expect(der::OID, "").ok()?.value != OID_MGF1 {
        return None;
    }
    let mgf_hash = digest_algorithm(mr.expect(der::SEQUENCE, "").ok()?)?;
    let salt = der::read_exact(salt.value, der::INTEGER).ok()?;
    let salt_ok = salt.value.len() == 1 && usize::from(salt.value[0]) == hash.len();
    let trailer_ok = match trailer {
        None => true,
        Some(t) => der::read_exact(t.value, der::INTEGER).ok()?.value == [1],
    };
    (mr.is_empty() && mgf_hash == hash && salt_ok && trailer_ok).then_some(hash)
}

/// SHA-256, SHA-384 or SHA-512 as an AlgorithmIdentifier (parameters NULL or absent).
pub(super) fn digest_algorithm(ai: Tlv<'_>) -> Option<Hash> {
    let mut r = Reader::new(ai.value);
    let oid = r.expect(der::OID, "").ok()?;
    if let Some(p) = r.next_tlv().ok()?
        && p.raw != [0x05, 0x00]
    {
        return None;
    }
    if !r.is_empty() {
        return None;
    }
    match oid.value {
        OID_SHA256 => Some(Hash::Sha256),
        OID_SHA384 => Some(Hash::Sha384),
        OID_SHA512 => Some(Hash::Sha512),
        _ => None,
    }
}

/// The contents of a BIT STRING holding whole bytes (a key or a signature).
pub(super) fn whole_bytes(bit_string: &[u8]) -> Result<&[u8], VerifyError> {
    match bit_string.split_first() {
        Some((0, bytes)) => Ok(bytes),
        _ => Err(invalid("a BIT STRING with unused bits")),
    }
}

/// The issuer's key verifies `child`'s signature over `child`'s raw TBSCertificate.
/// How many verified signatures on CA certificates [`verify_signed_by`] remembers.
const VERIFIED_CA_SIGNATURES: usize = 4096;

/// How many verified signatures on other certificates (leaves) it remembers, per
/// generation (two: up to twice this, 32 bytes each).
const VERIFIED_LEAF_SIGNATURES: usize = 16_384;

/// Signatures on CA certificates found valid: the SHA-256 of the signed bytes, the
/// signature and the issuer's key. Every submission under one intermediate repeats
/// the check of that intermediate by its root (an RSA verification costs more than
/// the rest of an add); a signature's validity depends on nothing else, so it is
/// checked once. Full: forgotten, checked again.
pub(super) fn verified_ca_signatures()
-> &'static std::sync::Mutex<std::collections::HashSet<[u8; 32]>> {
    static SEEN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<[u8; 32]>>> =
        std::sync::OnceLock::new();
    SEEN.get_or_init(Default::default)
}

/// Signatures on leaves found valid, the same way, kept apart so that leaves (one per
/// submission) never push out the CA links every submission repeats: a chain submitted
/// again (a CA's retries, several logs' worth of one chain, a client replaying one)
/// costs no signature check (#62). Two generations: when the current one is full it
/// becomes the previous one.
fn verified_leaf_signatures() -> &'static std::sync::Mutex<[std::collections::HashSet<[u8; 32]>; 2]>
{
    static SEEN: std::sync::OnceLock<std::sync::Mutex<[std::collections::HashSet<[u8; 32]>; 2]>> =
        std::sync::OnceLock::new();
    SEEN.get_or_init(Default::default)
}

#[cfg(test)]
thread_local! {
    /// Tests of what is checked inline turn the leaf cache off on their own thread, so
    /// that another test's validation of the same chain does not change their answer.
    pub(super) static LEAF_CACHE_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether verified leaf signatures are remembered and looked up (always, but in the
/// tests that turn it off).
fn leaf_cache_on() -> bool {
    #[cfg(test)]
    {
        !LEAF_CACHE_OFF.get()
    }
    #[cfg(not(test))]
    {
        true
    }
}

pub(super) fn verify_signed_by(child: &Cert<'_>, issuer: &Cert<'_>) -> Result<(), VerifyError> {
    let is_ca = child.basic_constraints().is_some_and(|(ca, _)| ca);
    let mut h = Sha256::new();
    for part in [child.tbs, child.sig_alg.raw, child.signature, issuer.spki] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    let key: [u8; 32] = h.finalize().into();
    if is_ca {
        let seen = || {
            verified_ca_signatures()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        if seen().contains(&key) {
            return Ok(());
        }
        verify_signature(child, issuer)?;
        let mut seen = seen();
        if seen.len() >= VERIFIED_CA_SIGNATURES {
            seen.clear();
        }
        seen.insert(key);
        return Ok(());
    }
    if !leaf_cache_on() {
        return verify_signature(child, issuer);
    }
    let seen = || {
        verified_leaf_signatures()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    };
    if seen().iter().any(|g| g.contains(&key)) {
        return Ok(());
    }
    verify_signature(child, issuer)?;
    let mut seen = seen();
    if seen[0].len() >= VERIFIED_LEAF_SIGNATURES {
        seen[1] = std::mem::take(&mut seen[0]);
    }
    seen[0].insert(key);
    Ok(())
}

pub(super) fn verify_signature(child: &Cert<'_>, issuer: &Cert<'_>) -> Result<(), VerifyError> {
    verify_signature_by(child, issuer, true)
}

/// [`verify_signature`], RSA and ECDSA through aws-lc-rs where it takes the key
/// (`fast`), else through RustCrypto (tests compare the two).
pub(super) fn verify_signature_by(
    child: &Cert<'_>,
    issuer: &Cert<'_>,
    fast: bool,
) -> Result<(), VerifyError> {
    let alg = signature_algorithm(&child.sig_alg)?;
    let signature = whole_bytes(child.signature)?;
    // SubjectPublicKeyInfo ::= SEQUENCE { algorithm AlgorithmIdentifier, subjectPublicKey BIT STRING }
    let spki = der::read_exact(issuer.spki, der::SEQUENCE).map_err(invalid)?;
    let mut r = Reader::new(spki.value);
    let key_alg = r
        .expect(der::SEQUENCE, "no key algorithm")
        .map_err(invalid)?;
    let key_bits = r
        .expect(der::BIT_STRING, "no public key")
        .map_err(invalid)?;
    let key = whole_bytes(key_bits.value)?;
    let mut ar = Reader::new(key_alg.value);
    let key_oid = ar
        .expect(der::OID, "no key algorithm OID")
        .map_err(invalid)?;
    let key_params = ar.next_tlv().map_err(invalid)?;
    let tbs = child.tbs;
    match alg {
        SigAlg::RsaPkcs1(hash) => {
            if key_oid.value != OID_RSA_KEY {
                return Err(invalid("an RSA signature but the issuer's key is not RSA"));
            }
            if fast && let Some((params, bits)) = fast_rsa(key, alg) {
                inline_check(bits <= 4096)?;
                return verify_fast(issuer, alg, params, key, tbs, signature)
                    .map_err(|()| invalid("bad RSA signature"));
            }
            inline_check(false)?;
            let key = rsa_key(key)?;
            let scheme = match hash {
                Hash::Sha1 => Pkcs1v15Sign::new::<Sha1>(),
                Hash::Sha256 => Pkcs1v15Sign::new::<Sha256>(),
                Hash::Sha384 => Pkcs1v15Sign::new::<Sha384>(),
                Hash::Sha512 => Pkcs1v15Sign::new::<Sha512>(),
            };
            key.verify(scheme, &hash.digest(tbs), signature)
                .map_err(|_| invalid("bad RSA signature"))
        }
        SigAlg::RsaPss(hash) => {
            if key_oid.value != OID_RSA_KEY {
                return Err(invalid(
                    "an RSA-PSS signature but the issuer's key is not RSA",
                ));
            }
            if fast && let Some((params, bits)) = fast_rsa(key, alg) {
                inline_check(bits <= 4096)?;
                return verify_fast(issuer, alg, params, key, tbs, signature)
                    .map_err(|()| invalid("bad RSA-PSS signature"));
            }
            inline_check(false)?;
            let key = rsa_key(key)?;
            let salt = hash.len();
            let scheme = match hash {
                Hash::Sha256 => rsa::Pss::new_with_salt::<Sha256>(salt),
                Hash::Sha384 => rsa::Pss::new_with_salt::<Sha384>(salt),
                Hash::Sha512 => rsa::Pss::new_with_salt::<Sha512>(salt),
                Hash::Sha1 => return Err(VerifyError::Unsupported("RSASSA-PSS with SHA-1".into())),
            };
            key.verify(scheme, &hash.digest(tbs), signature)
                .map_err(|_| invalid("bad RSA-PSS signature"))
        }
        SigAlg::Ecdsa(hash) => {
            if key_oid.value != OID_EC_KEY {
                return Err(invalid("an ECDSA signature but the issuer's key is not EC"));
            }
            let curve = key_params
                .filter(|p| p.tag == der::OID)
                .ok_or_else(|| invalid("an EC key without a named curve"))?;
            if fast && let Some(params) = fast_ecdsa(curve.value, key, hash) {
                // P-384 costs ~4x P-256 in aws-lc-rs, P-521 more (benches/benches/ct.rs).
                inline_check(curve.value == OID_P256)?;
                return verify_fast(issuer, alg, params, key, tbs, signature)
                    .map_err(|()| invalid("bad ECDSA signature"));
            }
            inline_check(false)?;
            verify_ecdsa(curve.value, key, &hash.digest(tbs), signature)
        }
        SigAlg::Ed25519 => {
            if key_oid.value != OID_ED25519 {
                return Err(invalid(
                    "an Ed25519 signature but the issuer's key is not Ed25519",
                ));
            }
            let key: &[u8; 32] = key
                .try_into()
                .map_err(|_| invalid("an Ed25519 key not of 32 bytes"))?;
            inline_check(true)?;
            let key = ed25519_dalek::VerifyingKey::from_bytes(key).map_err(invalid)?;
            let sig = ed25519_dalek::Signature::from_slice(signature).map_err(invalid)?;
            key.verify(tbs, &sig)
                .map_err(|_| invalid("bad Ed25519 signature"))
        }
    }
}

/// A verification algorithm of aws-lc-rs.
type FastParams = dyn aws_lc_rs::signature::VerificationAlgorithm;

/// Verifies `signature` over `message` with aws-lc-rs, under `issuer`'s `key` (the
/// public key's bits), for `params` (what `alg` is in aws-lc-rs). The key is parsed once
/// per parsed `issuer`, for the first algorithm it verifies: a CA certificate kept in
/// the cache (`CaCert`) then checks each leaf under it without setting its key up again
/// (~2.4 µs of an RSA-2048 check's ~18.5). Another algorithm under the same key is
/// rare (an issuer signs with one) and parses it each time.
pub(super) fn verify_fast(
    issuer: &Cert<'_>,
    alg: SigAlg,
    params: &'static FastParams,
    key: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), ()> {
    use aws_lc_rs::signature::{ParsedPublicKey, UnparsedPublicKey};
    let parsed = issuer
        .fast_key
        .get_or_init(|| ParsedPublicKey::new(params, key).ok().map(|k| (alg, k)));
    match parsed {
        Some((parsed_for, parsed)) if *parsed_for == alg => parsed.verify_sig(message, signature),
        _ => UnparsedPublicKey::new(params, key).verify(message, signature),
    }
    .map_err(|_| ())
}

/// aws-lc-rs's verification algorithm for `alg` under the RSAPublicKey `der_key`, and
/// the modulus's bits, when the key is within what it takes: a modulus of 2048 to 8192
/// bits and a public exponent that is odd, at least 3 and at most 32 bits (it refuses
/// others, and its error does not say why). Then its answer is final; otherwise the
/// `rsa` crate decides (smaller legacy keys, unusual exponents), so what is accepted
/// does not depend on the library. aws-lc-rs is ~15-20× faster here (2048-bit, SHA-256:
/// ~16 µs with the key parsed once, against ~310 µs), and every add of a chain under
/// an RSA issuer verifies the leaf's signature (benches/benches/ct.rs).
pub(super) fn fast_rsa(der_key: &[u8], alg: SigAlg) -> Option<(&'static FastParams, usize)> {
    use aws_lc_rs::signature as rs;
    let seq = der::read_exact(der_key, der::SEQUENCE).ok()?;
    let mut r = Reader::new(seq.value);
    let n = r.expect(der::INTEGER, "").ok()?;
    let e = r.expect(der::INTEGER, "").ok()?;
    if !r.is_empty() {
        return None;
    }
    let positive = |v: &[u8]| -> Option<usize> {
        // DER: a leading zero only before a byte with its top bit set.
        let v = match v {
            [0, rest @ ..] if rest.first().is_some_and(|b| b & 0x80 != 0) => rest,
            [b, ..] if b & 0x80 == 0 && *b != 0 => v,
            _ => return None,
        };
        Some(v.len() * 8 - v[0].leading_zeros() as usize)
    };
    let n_bits = positive(n.value)?;
    let e_bits = positive(e.value)?;
    let e_odd = e.value.last().is_some_and(|b| b & 1 == 1);
    if !(2048..=MAX_RSA_BITS).contains(&n_bits) || !(2..=32).contains(&e_bits) || !e_odd {
        return None;
    }
    let params: &'static FastParams = match alg {
        SigAlg::RsaPkcs1(Hash::Sha1) => &rs::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        SigAlg::RsaPkcs1(Hash::Sha256) => &rs::RSA_PKCS1_2048_8192_SHA256,
        SigAlg::RsaPkcs1(Hash::Sha384) => &rs::RSA_PKCS1_2048_8192_SHA384,
        SigAlg::RsaPkcs1(Hash::Sha512) => &rs::RSA_PKCS1_2048_8192_SHA512,
        SigAlg::RsaPss(Hash::Sha256) => &rs::RSA_PSS_2048_8192_SHA256,
        SigAlg::RsaPss(Hash::Sha384) => &rs::RSA_PSS_2048_8192_SHA384,
        SigAlg::RsaPss(Hash::Sha512) => &rs::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    };
    Some((params, n_bits))
}

/// aws-lc-rs's verification algorithm for an ECDSA signature with `hash` under the key
/// `point` on `curve`, when it takes it: P-256 or P-384 with SHA-256 or SHA-384, an
/// uncompressed point. Then its answer is final; otherwise (P-521, SHA-1, SHA-512, a
/// compressed point) RustCrypto decides, and both take the same signatures (tests
/// compare them). aws-lc-rs is ~5× faster than RustCrypto on P-256 and ~5.6× on P-384
/// (`benches/benches/ct.rs`), and every add of a chain under an ECDSA issuer verifies
/// the leaf's signature.
pub(super) fn fast_ecdsa(curve: &[u8], point: &[u8], hash: Hash) -> Option<&'static FastParams> {
    use aws_lc_rs::signature as rs;
    if point.first() != Some(&0x04) {
        return None;
    }
    let params: &'static FastParams = match (curve, hash) {
        (OID_P256, Hash::Sha256) => &rs::ECDSA_P256_SHA256_ASN1,
        (OID_P256, Hash::Sha384) => &rs::ECDSA_P256_SHA384_ASN1,
        (OID_P384, Hash::Sha256) => &rs::ECDSA_P384_SHA256_ASN1,
        (OID_P384, Hash::Sha384) => &rs::ECDSA_P384_SHA384_ASN1,
        _ => return None,
    };
    Some(params)
}

/// An RSAPublicKey (RFC 8017 §A.1.1): SEQUENCE { modulus INTEGER, publicExponent INTEGER }.
pub(super) fn rsa_key(der_key: &[u8]) -> Result<RsaPublicKey, VerifyError> {
    let seq = der::read_exact(der_key, der::SEQUENCE).map_err(invalid)?;
    let mut r = Reader::new(seq.value);
    let n = r.expect(der::INTEGER, "no RSA modulus").map_err(invalid)?;
    let e = r.expect(der::INTEGER, "no RSA exponent").map_err(invalid)?;
    if !r.is_empty() {
        return Err(invalid("trailing bytes in an RSA key"));
    }
    if n.value.first().is_none_or(|&b| b & 0x80 != 0)
        || e.value.first().is_none_or(|&b| b & 0x80 != 0)
    {
        return Err(invalid("a negative or empty RSA key integer"));
    }
    RsaPublicKey::new_with_max_size(
        BigUint::from_bytes_be(n.value),
        BigUint::from_bytes_be(e.value),
        MAX_RSA_BITS,
    )
    .map_err(|e| invalid(format!("an unusable RSA key: {e}")))
}

/// Verifies a DER ECDSA signature over a digest. The digest is the one the signature
/// algorithm names, whatever the curve (ecdsa-with-SHA256 on P-384 is valid X9.62):
/// FIPS 186-4 §6.4 takes its leftmost bits up to the order's length; a shorter digest
/// is used whole, which left-padding it to the field size does.
pub(super) fn verify_ecdsa(
    curve: &[u8],
    point: &[u8],
    digest: &[u8],
    sig: &[u8],
) -> Result<(), VerifyError> {
    fn prehash(digest: &[u8], field: usize) -> Cow<'_, [u8]> {
        if digest.len() >= field {
            Cow::Borrowed(digest)
        } else {
            let mut v = vec![0u8; field - digest.len()];
            v.extend_from_slice(digest);
            Cow::Owned(v)
        }
    }
    let bad = |_| invalid("bad ECDSA signature");
    match curve {
        OID_P256 => {
            let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(invalid)?;
            let sig = p256::ecdsa::Signature::from_der(sig).map_err(invalid)?;
            key.verify_prehash(&prehash(digest, 32), &sig).map_err(bad)
        }
        OID_P384 => {
            let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(invalid)?;
            let sig = p384::ecdsa::Signature::from_der(sig).map_err(invalid)?;
            key.verify_prehash(&prehash(digest, 48), &sig).map_err(bad)
        }
        OID_P521 => {
            let key = p521::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(invalid)?;
            let sig = p521::ecdsa::Signature::from_der(sig).map_err(invalid)?;
            key.verify_prehash(&prehash(digest, 66), &sig).map_err(bad)
        }
        other => Err(VerifyError::Unsupported(format!(
            "ECDSA on curve {}",
            oid_name(other)
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// The precertificate's TBSCertificate (RFC 6962 §3.2).
