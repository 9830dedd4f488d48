//! A short, bounded run of every fuzz target in the ordinary test suite (stable Rust,
//! no fuzzer runtime): each target gets every file of its seed corpus
//! (`fuzz/corpus/<target>/`), every input a fuzzer once failed on
//! (`fuzz/regressions/<target>/`), then a few thousand deterministic mutations of them.
//! A panic names the target and the input (hex), which can be added to the
//! regressions directory.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Mutated inputs per target: enough to reach past the seeds' first bytes, few enough
/// for a few seconds per target.
const MUTATIONS: usize = 10_000;

/// This crate's directory, read at run time: the binary may come from a build in another
/// clone (a shared target directory).
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let root = manifest_dir();
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            out.push((f.display().to_string(), std::fs::read(&f).unwrap()));
        }
    }
    out
}

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes the formats give meaning to.
const INTERESTING: &[u8] = b"\n\0 +/.-=0123456789pxabAZ\xe2\x80\x94\xff\x7f\t#";

fn mutate(seeds: &[(String, Vec<u8>)], rng: &mut Rng) -> Vec<u8> {
    let mut b = seeds[rng.below(seeds.len())].1.clone();
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                b.insert(i, INTERESTING[rng.below(INTERESTING.len())]);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                b.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                let chunk = b[i..i + n].to_vec();
                let at = rng.below(len + 1);
                b.splice(at..at, chunk);
            }
            5 => {
                // Splice with another input.
                let other = &seeds[rng.below(seeds.len())].1;
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            6 => b.truncate(rng.below(len + 1)),
            _ => {
                let n = rng.below(64);
                b = (0..n).map(|_| rng.next() as u8).collect();
            }
        }
    }
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// How long one target's whole run may take: an input that makes a parser slow (an
/// exponential case) fails the test, naming the input, instead of hanging it.
const LIMIT: Duration = Duration::from_secs(300);

fn run(target: &'static str, f: fn(&[u8])) {
    let seeds = inputs(target);
    assert!(!seeds.is_empty(), "no seed corpus for {target}");
    let current: Arc<Mutex<(String, Vec<u8>)>> = Arc::default();
    let (done_tx, done_rx) = mpsc::channel();
    let shared = current.clone();
    std::thread::spawn(move || {
        let check = |what: String, input: &[u8]| {
            *shared.lock().unwrap() = (what.clone(), input.to_vec());
            if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
                return Err(format!(
                    "fuzz target {target} failed on {what}: input (hex) {}",
                    hex(input)
                ));
            }
            Ok(())
        };
        let result: Result<(), String> = (|| {
            for (name, bytes) in &seeds {
                check(name.clone(), bytes)?;
            }
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
            for i in 0..MUTATIONS {
                let input = mutate(&seeds, &mut rng);
                check(format!("mutation {i}"), &input)?;
            }
            Ok(())
        })();
        let _ = done_tx.send(result);
    });
    match done_rx.recv_timeout(LIMIT) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => {
            let (what, input) = current.lock().unwrap().clone();
            panic!(
                "fuzz target {target} still running after {LIMIT:?}, on {what}: input (hex) {}",
                hex(&input)
            );
        }
    }
}

#[test]
fn tile() {
    run("tile", tlogd_fuzz::tile);
}

#[test]
fn note() {
    run("note", tlogd_fuzz::note);
}

#[test]
fn keys() {
    run("keys", tlogd_fuzz::keys);
}

#[test]
fn witness() {
    run("witness", tlogd_fuzz::witness);
}

#[test]
fn config() {
    run("config", tlogd_fuzz::config);
}

#[test]
fn ct() {
    run("ct", tlogd_fuzz::ct);
}

#[test]
fn verify_log() {
    run("verify_log", tlogd_fuzz::verify_log);
}

/// The committed seeds are what `fuzz-seeds` writes for the whole logs: a change to
/// the encoding that forgot them would leave the fuzzer starting from noise.
#[test]
fn whole_log_seeds_are_current() {
    let root = manifest_dir().join("corpus/verify_log");
    let got = std::fs::read(root.join("size5")).unwrap();
    assert_eq!(got, tlogd_fuzz::sample_log(&[5]));
}
