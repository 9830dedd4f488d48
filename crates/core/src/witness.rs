//! The log's side of witnessing: C2SP tlog-witness `add-checkpoint` request and
//! response bodies, and witness policies in the C2SP tlog-policy format (which
//! witnesses, and how many of them must cosign: `any`, `all`, `k` of n, nested
//! groups).

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::cosignature::CosignatureVerifier;
use crate::hash::Hash;
use crate::note::{Note, NoteError, NoteSignature, NoteVerifier};

/// tlog-witness "add-checkpoint": the client MUST NOT send more than 63 proof lines.
pub const MAX_PROOF_LINES: usize = 63;

/// tlog-witness "add-checkpoint": the `Content-Type` of a 409 response.
pub const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// A malformed add-checkpoint exchange.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WitnessProtocolError {
    /// The request or response body does not follow tlog-witness.
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// tlog-witness "add-checkpoint" request body: the old size line, the consistency
/// proof lines, an empty line, then the signed checkpoint.
pub fn add_checkpoint_body(old: u64, proof: &[Hash], signed_checkpoint: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(16 + 45 * proof.len() + signed_checkpoint.len());
    body.extend_from_slice(format!("old {old}\n").as_bytes());
    for h in proof {
        body.extend_from_slice(B64.encode(h).as_bytes());
        body.push(b'\n');
    }
    body.push(b'\n');
    body.extend_from_slice(signed_checkpoint);
    body
}

/// A parsed add-checkpoint request (what a witness receives).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size of the previous checkpoint the proof starts from.
    pub old: u64,
    /// The consistency proof from `old` to the checkpoint's size.
    pub proof: Vec<Hash>,
    /// The signed checkpoint, as sent.
    pub checkpoint: Vec<u8>,
}

/// Parse an add-checkpoint request body strictly (tlog-witness "add-checkpoint").
pub fn parse_add_checkpoint(body: &[u8]) -> Result<AddCheckpoint, WitnessProtocolError> {
    let bad = WitnessProtocolError::Malformed;
    let mut rest = body;
    let next_line = |rest: &mut &[u8]| -> Result<Vec<u8>, WitnessProtocolError> {
        let i = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(bad("request: line without newline"))?;
        let line = rest[..i].to_vec();
        *rest = &rest[i + 1..];
        Ok(line)
    };
    let first = next_line(&mut rest)?;
    let old = std::str::from_utf8(&first)
        .ok()
        .and_then(|l| l.strip_prefix("old "))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .filter(|n| *n == "0" || !n.starts_with('0'))
        .and_then(|n| n.parse().ok())
        .ok_or(bad("request: old size line"))?;
    let mut proof = Vec::new();
    loop {
        let line = next_line(&mut rest)?;
        if line.is_empty() {
            break;
        }
        if proof.len() == MAX_PROOF_LINES {
            return Err(bad("request: more than 63 proof lines"));
        }
        let h: Hash = B64
            .decode(&line)
            .ok()
            .and_then(|h| h.try_into().ok())
            .ok_or(bad("request: proof line is not base64 of 32 bytes"))?;
        proof.push(h);
    }
    Ok(AddCheckpoint {
        old,
        proof,
        checkpoint: rest.to_vec(),
    })
}

/// The size in a 409 response body: decimal, then a newline.
pub fn parse_size_body(body: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(body).ok()?.strip_suffix('\n')?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// The signature lines of a 200 add-checkpoint response, parsed as the spec suggests:
/// appended to the checkpoint's note text. Returns them all; the caller keeps the ones
/// of keys it trusts ("the client MUST ignore any cosignatures from unknown keys").
pub fn parse_cosignatures(
    checkpoint_text: &str,
    body: &[u8],
) -> Result<Vec<NoteSignature>, NoteError> {
    let mut note = Vec::with_capacity(checkpoint_text.len() + 1 + body.len());
    note.extend_from_slice(checkpoint_text.as_bytes());
    note.push(b'\n');
    note.extend_from_slice(body);
    Ok(Note::parse(&note)?.signatures)
}

/// Why a policy file was refused. Messages give the line number.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("witness policy line {line}: {message}")]
pub struct PolicyError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// A witness named by a policy.
#[derive(Clone, Debug)]
pub struct PolicyWitness {
    /// The name the policy uses for it (only meaningful inside the policy).
    pub name: String,
    /// Its cosigner key.
    pub verifier: CosignatureVerifier,
    /// Its submission prefix (tlog-witness "HTTP Interface"), if given.
    pub url: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Member {
    Witness(usize),
    Group(usize),
}

#[derive(Clone, Debug)]
struct Group {
    name: String,
    threshold: usize,
    members: Vec<Member>,
}

/// A tlog-policy: logs, witnesses, groups and the quorum.
#[derive(Clone, Debug)]
pub struct WitnessPolicy {
    logs: Vec<NoteVerifier>,
    witnesses: Vec<PolicyWitness>,
    groups: Vec<Group>,
    /// `None`: `quorum none`.
    quorum: Option<Member>,
}

impl WitnessPolicy {
    /// Parse a policy (tlog-policy "Policy file syntax and structure"): `log <vkey>
    /// [<url>]`, `witness <name> <vkey> [<url>]`, `group <name> all|any|<k> <name>...`,
    /// exactly one `quorum <name>|none`; names are defined before use and listed at
    /// most once per group; no key twice; `#` comments and blank lines.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut logs: Vec<NoteVerifier> = Vec::new();
        let mut witnesses: Vec<PolicyWitness> = Vec::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut names: HashMap<String, Member> = HashMap::new();
        let mut quorum: Option<Option<Member>> = None;
        for (i, raw) in text.split('\n').enumerate() {
            let line = i + 1;
            let err = |m: String| PolicyError { line, message: m };
            if raw
                .bytes()
                .any(|b| (b < 0x20 && b != b'\t' && b != b'\r') || b == 0x7f)
            {
                return Err(err("control character".into()));
            }
            let words: Vec<&str> = raw
                .split([' ', '\t', '\r'])
                .filter(|w| !w.is_empty())
                .collect();
            let Some(&keyword) = words.first() else {
                continue;
            };
            if keyword.starts_with('#') {
                continue;
            }
            match keyword {
                "log" => {
                    if !(2..=3).contains(&words.len()) {
                        return Err(err("expected: log <vkey> [<url>]".into()));
                    }
                    let v = NoteVerifier::from_vkey(words[1])
                        .map_err(|e| err(format!("log key: {e}")))?;
                    if logs.iter().any(|l| l.to_vkey() == v.to_vkey()) {
                        return Err(err("duplicate log".into()));
                    }
                    logs.push(v);
                }
                "witness" => {
                    if !(3..=4).contains(&words.len()) {
                        return Err(err("expected: witness <name> <vkey> [<url>]".into()));
                    }
                    let name = words[1];
                    if name == "none" || names.contains_key(name) {
                        return Err(err(format!("name {name:?} is already defined")));
                    }
                    let verifier = CosignatureVerifier::from_vkey(words[2])
                        .map_err(|e| err(format!("witness key: {e}")))?;
                    if witnesses
                        .iter()
                        .any(|w| w.verifier.public_key() == verifier.public_key())
                    {
                        return Err(err("duplicate witness key".into()));
                    }
                    names.insert(name.to_string(), Member::Witness(witnesses.len()));
                    witnesses.push(PolicyWitness {
                        name: name.to_string(),
                        verifier,
                        url: words.get(3).map(|u| u.trim_end_matches('/').to_string()),
                    });
                }
                "group" => {
                    if words.len() < 4 {
                        return Err(err("expected: group <name> all|any|<k> <name>...".into()));
                    }
                    let name = words[1];
                    if name == "none" || names.contains_key(name) {
                        return Err(err(format!("name {name:?} is already defined")));
                    }
                    let mut members = Vec::new();
                    for m in &words[3..] {
                        let member = names.get(*m).cloned().ok_or_else(|| {
                            err(format!("{m:?} is not defined on an earlier line"))
                        })?;
                        if members.contains(&member) {
                            return Err(err(format!("{m:?} is listed twice")));
                        }
                        members.push(member);
                    }
                    let n = members.len();
                    let threshold = match words[2] {
                        "all" => n,
                        "any" => 1,
                        k => {
                            let valid = !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
                            match k.parse::<usize>() {
                                Ok(k) if valid && (1..=n).contains(&k) => k,
                                _ => {
                                    return Err(err(format!(
                                        "threshold {k:?} is not all, any or a number from 1 to {n}"
                                    )));
                                }
                            }
                        }
                    };
                    names.insert(name.to_string(), Member::Group(groups.len()));
                    groups.push(Group {
                        name: name.to_string(),
                        threshold,
                        members,
                    });
                }
                "quorum" => {
                    if words.len() != 2 {
                        return Err(err("expected: quorum <name>|none".into()));
                    }
                    if quorum.is_some() {
                        return Err(err("a second quorum line".into()));
                    }
                    quorum = Some(match words[1] {
                        "none" => None,
                        n => Some(names.get(n).cloned().ok_or_else(|| {
                            err(format!("{n:?} is not defined on an earlier line"))
                        })?),
                    });
                }
                other => return Err(err(format!("unknown keyword {other:?}"))),
            }
        }
        let Some(quorum) = quorum else {
            return Err(PolicyError {
                line: text.split('\n').count(),
                message: "no quorum line".into(),
            });
        };
        Ok(WitnessPolicy {
            logs,
            witnesses,
            groups,
            quorum,
        })
    }

    /// The witnesses, in the order the policy lists them.
    pub fn witnesses(&self) -> &[PolicyWitness] {
        &self.witnesses
    }

    /// The logs the policy lists (may be empty).
    pub fn logs(&self) -> &[NoteVerifier] {
        &self.logs
    }

    /// Whether the witnesses with `cosigned[i] == true` (indices into
    /// [`WitnessPolicy::witnesses`]) satisfy the quorum.
    pub fn satisfied(&self, cosigned: &[bool]) -> bool {
        // Groups only name what was defined before them, so one pass in definition
        // order settles each group once. (Evaluating members recursively took time
        // exponential in the nesting when groups share subgroups: a 60-line policy
        // whose every group names the two before it never finished.)
        let mut met = Vec::with_capacity(self.groups.len());
        let is_met = |m: &Member, met: &[bool]| match m {
            Member::Witness(i) => cosigned.get(*i).copied().unwrap_or(false),
            Member::Group(g) => met.get(*g).copied().unwrap_or(false),
        };
        for group in &self.groups {
            let n = group.members.iter().filter(|m| is_met(m, &met)).count();
            met.push(n >= group.threshold);
        }
        match &self.quorum {
            None => true,
            Some(m) => is_met(m, &met),
        }
    }

    /// The quorum in words, for log lines: `all of (a, b)`, `2 of (x, y, z)`, ...
    /// Each group is spelled out once, where it first appears, and named thereafter
    /// (shared subgroups would otherwise repeat, exponentially in the nesting).
    pub fn describe(&self) -> String {
        match &self.quorum {
            None => "none".into(),
            Some(m) => {
                let mut spelled = vec![false; self.groups.len()];
                self.describe_member(m, &mut spelled)
            }
        }
    }

    fn describe_member(&self, m: &Member, spelled: &mut [bool]) -> String {
        match m {
            Member::Witness(i) => self.witnesses[*i].name.clone(),
            Member::Group(g) => {
                let group = &self.groups[*g];
                if std::mem::replace(&mut spelled[*g], true) {
                    return group.name.clone();
                }
                let n = group.members.len();
                let k = match group.threshold {
                    t if t == n && n > 1 => "all".to_string(),
                    1 if n > 1 => "any".to_string(),
                    t => t.to_string(),
                };
                let members: Vec<String> = group
                    .members
                    .iter()
                    .map(|m| self.describe_member(m, spelled))
                    .collect();
                format!("{} = {k} of ({})", group.name, members.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosignature::generate_cosigner_key;

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| generate_cosigner_key(&format!("w{i}.example")).unwrap().1)
            .collect()
    }

    #[test]
    fn the_spec_example_policy_and_its_quorum() {
        let k = keys(6);
        let text = format!(
            "# two organisations\n\
             log example.com/log/testdata+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx\n\n\
             witness X1 {} http://127.0.0.1:1/\nwitness X2 {}\n\twitness X3 {}  \n\
             group X-witnesses 2 X1 X2 X3\n\
             witness Y1 {}\nwitness Y2 {}\nwitness Y3 {}\n\
             group Y-witnesses any Y1 Y2 Y3\n\
             group X-and-Y all X-witnesses Y-witnesses\n\
             quorum X-and-Y\n",
            k[0], k[1], k[2], k[3], k[4], k[5]
        );
        let p = WitnessPolicy::parse(&text).unwrap();
        assert_eq!(p.witnesses().len(), 6);
        assert_eq!(p.logs().len(), 1);
        assert_eq!(p.witnesses()[0].url.as_deref(), Some("http://127.0.0.1:1"));
        let s = |v: [u8; 6]| p.satisfied(&v.map(|b| b == 1));
        assert!(s([1, 1, 0, 1, 0, 0]));
        assert!(s([0, 1, 1, 0, 0, 1]));
        assert!(!s([1, 0, 0, 1, 1, 1]), "one X is not enough");
        assert!(!s([1, 1, 1, 0, 0, 0]), "no Y");
        assert!(p.describe().contains("X-witnesses = 2 of (X1, X2, X3)"));
        let none = WitnessPolicy::parse("quorum none\n").unwrap();
        assert!(none.satisfied(&[]));
    }

    #[test]
    fn groups_sharing_subgroups_are_evaluated_once() {
        // Every group names the two before it: evaluated or described recursively,
        // the work doubles with each line (2^60 here); it must stay linear.
        let k = keys(2);
        let mut text = format!(
            "witness A {}\nwitness B {}\ngroup G0 any A B\ngroup G1 all G0 A\n",
            k[0], k[1]
        );
        for i in 2..62 {
            text.push_str(&format!("group G{i} all G{} G{}\n", i - 1, i - 2));
        }
        text.push_str("quorum G61\n");
        let p = WitnessPolicy::parse(&text).unwrap();
        // On a thread of its own, so that a regression fails here instead of hanging.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = (
                p.satisfied(&[true, false]),
                p.satisfied(&[false, true]),
                p.satisfied(&[false, false]),
                p.describe(),
            );
            let _ = tx.send(r);
        });
        let (both, only_b, none, d) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the quorum was not evaluated within 10 s");
        assert!(both);
        assert!(!only_b, "G1 needs A");
        assert!(!none);
        assert!(d.starts_with("G61 = all of (G60 = all of (G59"), "{d}");
        assert!(d.len() < 10_000, "{} bytes", d.len());
    }

    #[test]
    fn bad_policies_are_refused_with_the_line() {
        let k = keys(2);
        for (text, line, needle) in [
            (format!("witness a {}\n", k[0]), 2, "no quorum"),
            (format!("witness a {}\nquorum b\n", k[0]), 2, "not defined"),
            (
                format!("witness a {}\nwitness b {}\n", k[0], k[0]),
                2,
                "duplicate witness key",
            ),
            (
                format!("witness a {}\nwitness a {}\n", k[0], k[1]),
                2,
                "already defined",
            ),
            (
                format!("witness a {}\ngroup g 2 a\nquorum g\n", k[0]),
                2,
                "threshold",
            ),
            (
                format!("witness a {}\ngroup g any a a\n", k[0]),
                2,
                "listed twice",
            ),
            ("witness a example.com/log/testdata+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx\n".into(), 1, "type 0x04, Ed25519, or 0x06"),
            ("quorum none\nquorum none\n".into(), 2, "second quorum"),
            ("frobnicate\n".into(), 1, "unknown keyword"),
        ] {
            let e = WitnessPolicy::parse(&text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn add_checkpoint_bodies_round_trip() {
        let proof = vec![[1u8; 32], [2u8; 32]];
        let cp = b"example.com/log\n5\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n\n\xe2\x80\x94 example.com/log AAAAAAAA\n";
        let body = add_checkpoint_body(3, &proof, cp);
        assert!(body.starts_with(b"old 3\nAQEB"));
        let parsed = parse_add_checkpoint(&body).unwrap();
        assert_eq!((parsed.old, &parsed.proof[..]), (3, &proof[..]));
        assert_eq!(parsed.checkpoint, cp);
        for bad in [
            &b"old 03\n\nx"[..],
            b"old -1\n\nx",
            b"new 3\n\nx",
            b"old 3\nnot base64\n\nx",
            b"old 3",
        ] {
            assert!(parse_add_checkpoint(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_size_body(b"42\n"), Some(42));
        assert_eq!(parse_size_body(b"0\n"), Some(0));
        for bad in [&b"42"[..], b"042\n", b"x\n", b"\n"] {
            assert_eq!(parse_size_body(bad), None);
        }
    }

    #[test]
    fn policies_name_mldsa44_logs_and_witnesses() {
        use crate::mldsa::{MlDsa44Signer, MlDsa44Verifier, generate_mldsa44_key};
        use crate::note::SignatureAlgorithm;
        let (wsk, wvk) = generate_mldsa44_key("pq.example/w1").unwrap();
        let (_, log_vk) = generate_mldsa44_key("example.com/log").unwrap();
        let ed = keys(1);
        let text = format!(
            "log {log_vk}\nwitness PQ {wvk}\nwitness ED {}\ngroup both all PQ ED\nquorum both\n",
            ed[0]
        );
        let p = WitnessPolicy::parse(&text).unwrap();
        assert_eq!(
            p.logs()[0].algorithm(),
            SignatureAlgorithm::CosignatureMlDsa44
        );
        assert_eq!(p.logs()[0].to_vkey(), log_vk);
        let pq = &p.witnesses()[0].verifier;
        assert_eq!(pq.algorithm(), SignatureAlgorithm::CosignatureMlDsa44);
        let cp = "example.com/log\n5\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n";
        let w = MlDsa44Signer::from_skey(&wsk).unwrap();
        let sig = w.cosign(cp, 1_800_000_000).unwrap();
        assert!(pq.matches(&sig));
        assert_eq!(pq.verify_witnessed(cp, &sig), Ok(1_800_000_000));
        assert!(!p.satisfied(&[true, false]));
        assert!(p.satisfied(&[true, true]));
        // The same ML-DSA-44 key under another name (so another key ID) is a duplicate.
        let again = MlDsa44Verifier::new("pq.example/w2", w.mldsa44_verifier().public_key())
            .unwrap()
            .to_vkey();
        let e = WitnessPolicy::parse(&format!("witness a {wvk}\nwitness b {again}\n")).unwrap_err();
        assert!(e.message.contains("duplicate witness key"), "{e}");
    }
}
