//! Latency profiles: how long each kind of operation takes on the storage being imitated.
//!
//! A profile maps each [`OpKind`] to a [`Latency`], a uniform range of delays. The named
//! profiles imitate classes of storage whose durability costs differ from a local SSD:
//! `network` (NFS-like: fsync 5–10 ms, metadata 1–2 ms) and `cloud-block` (a replicated
//! block volume: fsync ~1 ms). Any operation can be overridden (`fsync=3ms`,
//! `rename=1ms..2ms`), from the command line or from [`crate::Options`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rng::SplitMix64;

/// The kinds of operation a latency can be set for (and that the cut report names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// `fsync(2)` of a file.
    Fsync,
    /// `fdatasync(2)` of a file.
    Fdatasync,
    /// `fsync(2)` of a directory.
    Fsyncdir,
    /// Creation of a file (`open(O_CREAT)`, `mknod`), a directory, a symlink or a hard link.
    Create,
    /// `rename(2)` and `renameat2(2)`.
    Rename,
    /// `unlink(2)` and `rmdir(2)`.
    Unlink,
    /// `open(2)` of an existing file or directory.
    Open,
    /// `read(2)`.
    Read,
    /// `write(2)`.
    Write,
    /// Name lookup (the kernel asks once per path component it has not cached).
    Lookup,
    /// `truncate(2)`, `chmod(2)`, `utimes(2)` and the like.
    Setattr,
}

impl OpKind {
    /// Every kind, in the order used for display.
    pub const ALL: [OpKind; 11] = [
        OpKind::Fsync,
        OpKind::Fdatasync,
        OpKind::Fsyncdir,
        OpKind::Create,
        OpKind::Rename,
        OpKind::Unlink,
        OpKind::Open,
        OpKind::Read,
        OpKind::Write,
        OpKind::Lookup,
        OpKind::Setattr,
    ];

    /// The kind's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Fsync => "fsync",
            OpKind::Fdatasync => "fdatasync",
            OpKind::Fsyncdir => "fsyncdir",
            OpKind::Create => "create",
            OpKind::Rename => "rename",
            OpKind::Unlink => "unlink",
            OpKind::Open => "open",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Lookup => "lookup",
            OpKind::Setattr => "setattr",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        OpKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = OpKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown operation {s:?} (one of {})", names.join(", "))
            })
    }
}

/// A delay drawn uniformly from `min..=max` for each operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Shortest delay.
    pub min: Duration,
    /// Longest delay (not below `min`).
    pub max: Duration,
}

impl Latency {
    /// No delay.
    pub const ZERO: Latency = Latency {
        min: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// A fixed delay.
    pub fn fixed(d: Duration) -> Self {
        Latency { min: d, max: d }
    }

    /// A delay drawn uniformly from `min..=max` (the two are swapped if given reversed).
    pub fn range(min: Duration, max: Duration) -> Self {
        if max < min {
            Latency { min: max, max: min }
        } else {
            Latency { min, max }
        }
    }

    /// Whether this adds no delay at all.
    pub fn is_zero(&self) -> bool {
        self.max.is_zero()
    }

    pub(crate) fn sample(&self, rng: &mut SplitMix64) -> Duration {
        if self.max <= self.min {
            return self.min;
        }
        let span = (self.max - self.min).as_nanos() as u64;
        self.min + Duration::from_nanos(rng.below(span + 1))
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", fmt_duration(self.min))
        } else {
            write!(f, "{}..{}", fmt_duration(self.min), fmt_duration(self.max))
        }
    }
}

impl FromStr for Latency {
    type Err = String;
    /// `5ms`, `500us`, `1s`, `0`, or a range `5ms..10ms`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once("..") {
            Some((a, b)) => Ok(Latency::range(parse_duration(a)?, parse_duration(b)?)),
            None => Ok(Latency::fixed(parse_duration(s)?)),
        }
    }
}

fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us == 0 {
        "0".into()
    } else if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

/// Parses `0`, `250us`, `5ms`, `1.5ms`, `2s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let (num, unit_ns) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(format!("duration {s:?} needs a unit (ns, us, ms, s)"));
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?}"))?;
    if !(0.0..=3600.0 * 1e9).contains(&(v * unit_ns)) {
        return Err(format!("duration {s:?} out of range (0 to 1 hour)"));
    }
    Ok(Duration::from_nanos((v * unit_ns) as u64))
}

/// A latency for every kind of operation (zero where none is set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// The named profile this started from (`none`, `cloud-block`, `network`).
    pub name: String,
    /// Per-operation latencies; an operation not in the map has none.
    pub latencies: BTreeMap<OpKind, Latency>,
}

impl Profile {
    /// The names [`Profile::named`] accepts.
    pub const NAMES: [&'static str; 3] = ["none", "cloud-block", "network"];

    /// No added latency.
    pub fn none() -> Self {
        Profile {
            name: "none".into(),
            latencies: BTreeMap::new(),
        }
    }

    /// A replicated cloud block volume (EBS/PD-like): each flush ~1 ms, the rest as local.
    pub fn cloud_block() -> Self {
        let sync = Latency::range(Duration::from_micros(800), Duration::from_micros(1200));
        let mut p = Profile {
            name: "cloud-block".into(),
            latencies: BTreeMap::new(),
        };
        for k in [OpKind::Fsync, OpKind::Fdatasync, OpKind::Fsyncdir] {
            p.latencies.insert(k, sync);
        }
        p
    }

    /// A network filesystem (NFS-like): a flush 5–10 ms (a commit to the server's disk),
    /// each metadata operation 1–2 ms (a round trip); data reads and writes are buffered
    /// and cost nothing extra.
    pub fn network() -> Self {
        let sync = Latency::range(Duration::from_millis(5), Duration::from_millis(10));
        let meta = Latency::range(Duration::from_millis(1), Duration::from_millis(2));
        let mut p = Profile {
            name: "network".into(),
            latencies: BTreeMap::new(),
        };
        for k in [OpKind::Fsync, OpKind::Fdatasync, OpKind::Fsyncdir] {
            p.latencies.insert(k, sync);
        }
        for k in [
            OpKind::Create,
            OpKind::Rename,
            OpKind::Unlink,
            OpKind::Open,
            OpKind::Setattr,
        ] {
            p.latencies.insert(k, meta);
        }
        p
    }

    /// The profile called `name` (one of [`Profile::NAMES`]).
    pub fn named(name: &str) -> Result<Self, String> {
        match name {
            "none" => Ok(Profile::none()),
            "cloud-block" => Ok(Profile::cloud_block()),
            "network" => Ok(Profile::network()),
            other => Err(format!(
                "unknown profile {other:?} (one of {})",
                Profile::NAMES.join(", ")
            )),
        }
    }

    /// Sets (or, with a zero latency, clears) one operation's latency.
    pub fn set(&mut self, op: OpKind, latency: Latency) -> &mut Self {
        if latency.is_zero() {
            self.latencies.remove(&op);
        } else {
            self.latencies.insert(op, latency);
        }
        self
    }

    /// Applies an override written `op=latency` (`fsync=5ms..10ms`).
    pub fn apply_override(&mut self, spec: &str) -> Result<&mut Self, String> {
        let (op, lat) = spec
            .split_once('=')
            .ok_or_else(|| format!("latency override {spec:?} is not OP=LATENCY"))?;
        let op: OpKind = op.trim().parse()?;
        let lat: Latency = lat.trim().parse()?;
        Ok(self.set(op, lat))
    }

    /// The latency of `op` (zero if none is set).
    pub fn get(&self, op: OpKind) -> Latency {
        self.latencies.get(&op).copied().unwrap_or(Latency::ZERO)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)?;
        for (k, v) in &self.latencies {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_latencies_and_overrides() {
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").is_err());
        let l: Latency = "10ms..5ms".parse().unwrap();
        assert_eq!(l.min, Duration::from_millis(5));
        let mut p = Profile::named("network").unwrap();
        p.apply_override("fsync=1ms").unwrap();
        assert_eq!(
            p.get(OpKind::Fsync),
            Latency::fixed(Duration::from_millis(1))
        );
        p.apply_override("rename=0").unwrap();
        assert!(p.get(OpKind::Rename).is_zero());
        assert!(p.apply_override("bogus=1ms").is_err());
        assert!(Profile::named("fast").is_err());
    }

    #[test]
    fn samples_stay_in_range() {
        let l = Latency::range(Duration::from_millis(5), Duration::from_millis(10));
        let mut rng = SplitMix64::new(3);
        for _ in 0..1000 {
            let d = l.sample(&mut rng);
            assert!(d >= l.min && d <= l.max);
        }
    }
}
