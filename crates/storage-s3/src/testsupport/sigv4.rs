//! AWS Signature Version 4 for the few requests `object_store` cannot make (creating a
//! bucket), so the tests need no `curl` or `mc`.

use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    // RFC 2104 with SHA-256 (64-byte blocks).
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |x: u8| block.map(|b| b ^ x);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// `YYYYMMDDTHHMMSSZ` of now.
fn amz_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d, h, mi, s, _) = tlogd_core::time::utc_fields(secs as i64 * 1000);
    format!("{y:04}{m:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// Who signs, and for which region.
pub struct Credentials<'a> {
    /// The region (part of the signing scope).
    pub region: &'a str,
    /// The access key id.
    pub access_key: &'a str,
    /// The secret access key.
    pub secret: &'a str,
}

/// The headers that sign `method path?query` with `body` to host `127.0.0.1:port` for
/// service `s3`. `query` is already canonical (`""`, or `policy=` for a bucket
/// policy).
pub fn sign(
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
    port: u16,
    creds: &Credentials<'_>,
) -> Vec<(String, String)> {
    let Credentials {
        region,
        access_key,
        secret,
    } = *creds;
    let date = amz_date();
    let day = &date[..8];
    let payload = hex(&Sha256::digest(body));
    let host = format!("127.0.0.1:{port}");
    let signed = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "{method}\n{path}\n{query}\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{date}\n\n{signed}\n{payload}"
    );
    let scope = format!("{day}/{region}/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    for part in [region, "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    vec![
        ("x-amz-date".into(), date.clone()),
        ("x-amz-content-sha256".into(), payload),
        (
            "Authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn dates_are_well_formed() {
        let d = amz_date();
        assert_eq!(d.len(), 16);
        assert!(d.starts_with("20") && d.ends_with('Z') && d.as_bytes()[8] == b'T');
    }
}
