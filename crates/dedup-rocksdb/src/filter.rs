//! A Bloom filter in memory over every hash the index's tables hold.
//!
//! Nearly every add asks the index about a hash it has never seen. RocksDB answers such
//! a miss from the Bloom filter of each table it might be in: one probe per level-0
//! table and one per deeper level, each behind a version lookup, a table-cache lookup
//! and a filter-block lookup. Measured with `examples/growth.rs`, a miss cost 1.1 µs at
//! 1M entries and 1.5–3.2 µs at 3–10M. This filter answers it with one cache line per
//! generation (below) and asks RocksDB only when it says "maybe" (~0.1 % of misses per
//! generation, and every duplicate).
//!
//! * **Blocks of one cache line.** A hash picks one 512-bit block and sets one bit in
//!   each of its eight 64-bit words (a split-block Bloom filter). At 16 bits per entry
//!   about 0.1 % of absent hashes answer "maybe", per generation (below). It was 10
//!   bits (~1 %): at 30M entries five generations then sent ~4 % of lookups to
//!   RocksDB, ~14 µs each across the index's two dozen sorted runs, and a lookup of a
//!   new hash averaged 900 ns; at 16 bits, 360 ns, and the index's CPU per entry fell
//!   by ~0.4 µs (`examples/growth.rs`, benches/results/history.md). A filter saved at 10 bits
//!   by an earlier release still loads; generations added after are 16.
//! * **Seeded.** Hashes are SHA-256 digests of client-chosen entries. The block and bits
//!   come from the hash mixed with a random seed (drawn when the filter is built, and
//!   saved with it), so nobody can grind
//!   entries that crowd one block without knowing the seed. (A crowded block would only
//!   send lookups to RocksDB: the filter never answers "absent" for a present hash.)
//! * **Generations.** A Bloom filter cannot grow, so when the newest one is full a new
//!   one as large as all the others together is added. A lookup probes each (a log
//!   started empty has 5 at 50M entries); a restart sizes the first to what the tables
//!   hold. Memory: 2 bytes per entry it is sized for, so at most ~4 bytes per
//!   indexed entry (128 MiB at 50M entries), and [`MIN_CAPACITY`] entries' worth
//!   (8 MiB) at least.
//! * **Saved at a clean close, else rebuilt.** A clean close saves the filter with a
//!   fingerprint of the table files it covers ([`TableFilter::save`]); the next open
//!   loads it if the tables are still exactly those, and deletes the file either way.
//!   Otherwise (a crash, a copied index, a damaged file) a background scan of the
//!   tables' keys refills it, ~340 ns per entry (3.4 s at 10M entries, measured); until
//!   then the filter answers "maybe" to everything and lookups go to RocksDB as
//!   before it existed.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use tlogd_core::engine::EntryHash;

/// Bits of filter per entry it is sized for (~0.1 % false "maybe").
const BITS_PER_ENTRY: u64 = 16;
/// What generations saved by earlier releases were sized with (~1 %).
const EARLIER_BITS_PER_ENTRY: u64 = 10;
/// The smallest generation, in entries: 8 MiB.
pub const MIN_CAPACITY: u64 = 4 << 20;

/// One cache line: a hash sets one bit in each word.
#[repr(align(64))]
struct Block([AtomicU64; 8]);

/// One fixed-size filter.
struct Generation {
    blocks: Box<[Block]>,
    /// Entries it is sized for.
    capacity: u64,
    /// Entries inserted (a hash inserted twice counts twice).
    inserted: AtomicU64,
}

impl Generation {
    fn new(capacity: u64) -> Self {
        Self::with_bits(capacity, BITS_PER_ENTRY)
    }

    /// Blocks for `capacity` entries at `bits` per entry.
    fn blocks_for(capacity: u64, bits: u64) -> Option<u64> {
        Some(capacity.checked_mul(bits)?.div_ceil(512).max(1))
    }

    fn with_bits(capacity: u64, bits: u64) -> Self {
        let blocks = Self::blocks_for(capacity, bits).unwrap_or(1);
        Generation {
            blocks: (0..blocks)
                .map(|_| Block(Default::default()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
            capacity,
            inserted: AtomicU64::new(0),
        }
    }

    /// The block for `probe` and the eight bits (one per word) it sets there.
    fn locate(&self, probe: &Probe) -> (&Block, [u64; 8]) {
        // Multiply-shift maps the 64-bit value onto the blocks without a division.
        let at = ((probe.block as u128 * self.blocks.len() as u128) >> 64) as usize;
        let mut bits = [0u64; 8];
        for (w, bit) in bits.iter_mut().enumerate() {
            *bit = 1 << ((probe.bits >> (w * 6)) & 63);
        }
        (&self.blocks[at], bits)
    }

    fn insert(&self, probe: &Probe) {
        let (block, bits) = self.locate(probe);
        for (word, bit) in block.0.iter().zip(bits) {
            // Most bits are set already once the filter fills; a load is cheaper than
            // a locked read-modify-write.
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    fn may_contain(&self, probe: &Probe) -> bool {
        let (block, bits) = self.locate(probe);
        // All eight words without branching on any: one cache line either way, and
        // the loads of several generations' lines can then be in flight together.
        block.0.iter().zip(bits).fold(true, |all, (word, bit)| {
            all & (word.load(Ordering::Relaxed) & bit != 0)
        })
    }
}

/// Whether any generation may hold the hash `probe` is for. No early exit (see
/// `Generation::may_contain`): nearly every answer is "no", which has to ask every
/// generation anyway.
fn any_may_contain(generations: &[Generation], probe: &Probe) -> bool {
    generations
        .iter()
        .fold(false, |any, g| any | g.may_contain(probe))
}

/// What a hash maps to, the same in every generation.
struct Probe {
    block: u64,
    bits: u64,
}

/// The filter over the index's tables.
pub struct TableFilter {
    seed: [u64; 2],
    generations: RwLock<Vec<Generation>>,
    /// Every hash in the tables has been inserted (the start-up scan is done).
    ready: AtomicBool,
}

impl TableFilter {
    /// An empty filter sized for `capacity` entries, not yet ready.
    pub fn new(capacity: u64) -> Self {
        let s = foldhash::fast::RandomState::default();
        use std::hash::BuildHasher;
        TableFilter {
            seed: [s.hash_one(0u8), s.hash_one(1u8)],
            generations: RwLock::new(vec![Generation::new(capacity.max(MIN_CAPACITY))]),
            ready: AtomicBool::new(false),
        }
    }

    fn probe(&self, hash: &EntryHash) -> Probe {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&hash[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Probe {
            block: mix(word(0) ^ self.seed[0]),
            bits: mix(word(1) ^ self.seed[1]),
        }
    }

    /// Insert `hashes`, adding a generation when the newest is full. Callers insert
    /// a table's hashes *before* the table becomes visible in RocksDB.
    pub fn insert_all<'a>(&self, hashes: impl ExactSizeIterator<Item = &'a EntryHash>) {
        let n = hashes.len() as u64;
        self.grow_for(n);
        let generations = self.generations.read().unwrap_or_else(|e| e.into_inner());
        let Some(newest) = generations.last() else {
            return;
        };
        for h in hashes {
            newest.insert(&self.probe(h));
        }
        newest.inserted.fetch_add(n, Ordering::Relaxed);
    }

    /// For each of `hashes` in turn: whether a table may hold it (as
    /// [`TableFilter::may_contain`] answers), then insert it. One pass over the
    /// filter instead of a pass of probes and a pass of inserts: a hash's line in the
    /// newest generation is fetched from memory once, not twice (the filter is far
    /// larger than the caches, so each fetch is a miss). A hash inserted earlier in
    /// the pass can only turn a later answer into "maybe" (a false one, ~0.1 %),
    /// never into "no", so the answers stay safe to act on. Callers insert a table's
    /// hashes *before* the table becomes visible in RocksDB.
    pub fn probe_and_insert<'a>(
        &self,
        hashes: impl ExactSizeIterator<Item = &'a EntryHash>,
    ) -> Vec<bool> {
        let n = hashes.len() as u64;
        self.grow_for(n);
        let ready = self.is_ready();
        let generations = self.generations.read().unwrap_or_else(|e| e.into_inner());
        let Some(newest) = generations.last() else {
            return vec![true; n as usize];
        };
        let answers = hashes
            .map(|h| {
                let probe = self.probe(h);
                let maybe = !ready || any_may_contain(&generations, &probe);
                newest.insert(&probe);
                maybe
            })
            .collect();
        newest.inserted.fetch_add(n, Ordering::Relaxed);
        answers
    }

    /// Add a generation if `n` more entries would overfill the newest.
    fn grow_for(&self, n: u64) {
        let full = |g: &Vec<Generation>| {
            g.last()
                .is_none_or(|newest| newest.inserted.load(Ordering::Relaxed) + n > newest.capacity)
        };
        if !full(&self.generations.read().unwrap_or_else(|e| e.into_inner())) {
            return;
        }
        let mut generations = self.generations.write().unwrap_or_else(|e| e.into_inner());
        if full(&generations) {
            let total: u64 = generations.iter().map(|g| g.capacity).sum();
            generations.push(Generation::new(total.max(n).max(MIN_CAPACITY)));
        }
    }

    /// False only if no table holds `hash`. Always true until [`TableFilter::set_ready`].
    pub fn may_contain(&self, hash: &EntryHash) -> bool {
        if !self.ready.load(Ordering::Acquire) {
            return true;
        }
        let probe = self.probe(hash);
        let generations = self.generations.read().unwrap_or_else(|e| e.into_inner());
        any_may_contain(&generations, &probe)
    }

    /// Every hash in the tables has been inserted: "no" answers can be trusted.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Back to "maybe" for everything, as while the start-up scan runs (tests).
    #[cfg(test)]
    pub(crate) fn set_unready(&self) {
        self.ready.store(false, Ordering::Release);
    }

    /// Whether [`TableFilter::set_ready`] was called.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Generations and bytes held.
    pub fn size(&self) -> (usize, usize) {
        let g = self.generations.read().unwrap_or_else(|e| e.into_inner());
        (g.len(), g.iter().map(|g| g.blocks.len() * 64).sum())
    }
}

/// The first bytes of a saved filter.
const SAVED_MAGIC: &[u8] = b"tlogd-dedup-filter v1\n";

impl TableFilter {
    /// Write the filter to `path` (via a temporary file and a rename) with
    /// `fingerprint`, which names the tables it covers. Not synced: a file lost or torn
    /// by a crash only means a scan at the next open.
    pub fn save(&self, path: &Path, fingerprint: &[u8; 32]) -> io::Result<()> {
        let tmp = path.with_extension("tmp");
        let generations = self.generations.read().unwrap_or_else(|e| e.into_inner());
        let mut out = ChecksummedWriter {
            inner: io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?),
            sum: Sha256::new(),
        };
        out.write_all(SAVED_MAGIC)?;
        out.write_all(fingerprint)?;
        for s in self.seed {
            out.write_all(&s.to_le_bytes())?;
        }
        out.write_all(&(generations.len() as u32).to_le_bytes())?;
        for g in generations.iter() {
            out.write_all(&g.capacity.to_le_bytes())?;
            out.write_all(&g.inserted.load(Ordering::Relaxed).to_le_bytes())?;
            out.write_all(&(g.blocks.len() as u64).to_le_bytes())?;
            for block in g.blocks.iter() {
                let mut line = [0u8; 64];
                for (chunk, word) in line.chunks_exact_mut(8).zip(&block.0) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
                }
                out.write_all(&line)?;
            }
        }
        let sum = out.sum.finalize();
        let mut inner = out.inner;
        inner.write_all(&sum)?;
        inner.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, path)
    }

    /// The filter saved at `path`, ready, if it was saved for the tables named by
    /// `fingerprint` and is intact; `None` otherwise (then scan the tables).
    pub fn load(path: &Path, fingerprint: &[u8; 32]) -> io::Result<Option<Self>> {
        let mut bytes = Vec::new();
        match std::fs::File::open(path) {
            Ok(mut f) => f.read_to_end(&mut bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(decode_saved(&bytes, fingerprint))
    }
}

/// Inverse of [`TableFilter::save`]; `None` if damaged or saved for other tables.
fn decode_saved(bytes: &[u8], fingerprint: &[u8; 32]) -> Option<TableFilter> {
    let body = bytes.get(..bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body)[..] != bytes[body.len()..] {
        return None;
    }
    let mut r = Reader(body.strip_prefix(SAVED_MAGIC)?);
    if r.take(32)? != fingerprint {
        return None;
    }
    let seed = [r.u64()?, r.u64()?];
    let count = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
    let mut generations = Vec::new();
    for _ in 0..count {
        let capacity = r.u64()?;
        let inserted = r.u64()?;
        let n = usize::try_from(r.u64()?).ok()?;
        let blocks: Box<[Block]> = r
            .take(n.checked_mul(64)?)?
            .chunks_exact(64)
            .map(|line| {
                let mut words: [AtomicU64; 8] = Default::default();
                for (word, chunk) in words.iter_mut().zip(line.chunks_exact(8)) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(chunk);
                    *word = AtomicU64::new(u64::from_le_bytes(w));
                }
                Block(words)
            })
            .collect();
        // The capacity must be the one these blocks were sized for (now, or by an
        // earlier release), and the count within it: a file that passes the checksum
        // yet claims more (written by another build, or crafted) would otherwise size
        // the next generation from it, or overflow the count.
        let sized = |bits| Generation::blocks_for(capacity, bits) == Some(blocks.len() as u64);
        if !(sized(BITS_PER_ENTRY) || sized(EARLIER_BITS_PER_ENTRY))
            || inserted > capacity.checked_mul(2)?
        {
            return None;
        }
        generations.push(Generation {
            blocks,
            capacity,
            inserted: AtomicU64::new(inserted),
        });
    }
    if !r.0.is_empty() || generations.is_empty() {
        return None;
    }
    Some(TableFilter {
        seed,
        generations: RwLock::new(generations),
        ready: AtomicBool::new(true),
    })
}

/// Reads a saved filter front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Writes through, hashing what it writes.
struct ChecksummedWriter<W> {
    inner: W,
    sum: Sha256,
}

impl<W: Write> Write for ChecksummedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sum.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A 64-bit finalizer (from MurmurHash3): every input bit moves every output bit, so
/// the seed reaches all of the block choice and the bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(n: u64) -> EntryHash {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&mix(n).to_le_bytes());
        h[8..16].copy_from_slice(&mix(n ^ 0x5555).to_le_bytes());
        h
    }

    /// Insert hashes `range` in batches of 100k, as tables would.
    fn insert_range(f: &TableFilter, range: std::ops::Range<u64>) {
        let mut batch = Vec::with_capacity(100_000);
        for i in range {
            batch.push(hash(i));
            if batch.len() == batch.capacity() {
                f.insert_all(batch.iter());
                batch.clear();
            }
        }
        f.insert_all(batch.iter());
    }

    #[test]
    fn says_maybe_to_everything_until_ready() {
        let f = TableFilter::new(0);
        assert!(f.may_contain(&hash(1)));
        f.set_ready();
        assert!(!f.may_contain(&hash(1)));
        f.insert_all([hash(1)].iter());
        assert!(f.may_contain(&hash(1)));
    }

    #[test]
    fn probe_and_insert_answers_as_before_the_insert_and_then_holds_every_hash() {
        let f = TableFilter::new(0);
        // Not ready: "maybe" throughout, and the hashes still go in.
        assert_eq!(f.probe_and_insert([hash(1), hash(2)].iter()), [true, true]);
        f.set_ready();
        assert!(f.may_contain(&hash(1)) && f.may_contain(&hash(2)));
        // Ready: a hash held says "maybe"; of 10,000 new ones nearly all say "no",
        // and every one is held afterwards.
        let asked: Vec<EntryHash> = [1].into_iter().chain(10..10_010).map(hash).collect();
        let answers = f.probe_and_insert(asked.iter());
        assert!(answers[0]);
        assert!(answers[1..].iter().filter(|m| **m).count() < 100);
        assert!(asked.iter().all(|h| f.may_contain(h)));
    }

    #[test]
    fn never_misses_an_inserted_hash_as_it_grows_and_rarely_says_maybe_otherwise() {
        let f = TableFilter::new(0);
        f.set_ready();
        let n = 3 * MIN_CAPACITY;
        insert_range(&f, 0..n);
        // MIN, MIN, 2*MIN: three generations for three MIN's worth.
        assert_eq!(f.size().0, 3);
        assert_eq!(f.size().1 as u64, 4 * MIN_CAPACITY * BITS_PER_ENTRY / 8);
        assert!((0..n).all(|i| f.may_contain(&hash(i))));
        let absent = 1_000_000;
        let maybe = (n..n + absent).filter(|&i| f.may_contain(&hash(i))).count();
        // ~0.1 % per full generation, three probed (the last half full). (At 10 bits
        // per entry this was ~2.3 %.)
        assert!(maybe < absent as usize * 5 / 1000, "{maybe} of {absent}");
        assert!(maybe > 0, "a filter this full answers 'maybe' sometimes");
    }

    #[test]
    fn a_saved_filter_loads_only_for_the_same_tables_and_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("filter");
        let f = TableFilter::new(0);
        insert_range(&f, 0..MIN_CAPACITY + 10);
        f.set_ready();
        let tables = [7u8; 32];
        f.save(&path, &tables).unwrap();
        let loaded = TableFilter::load(&path, &tables).unwrap().expect("loads");
        assert!(loaded.is_ready());
        assert_eq!(loaded.size(), f.size());
        assert_eq!(loaded.seed, f.seed);
        assert!((0..MIN_CAPACITY + 10).all(|i| loaded.may_contain(&hash(i))));
        let absent = (1u64 << 40..(1u64 << 40) + 10_000).filter(|&i| loaded.may_contain(&hash(i)));
        assert!(absent.count() < 300);
        // Other tables: a scan instead.
        assert!(TableFilter::load(&path, &[8u8; 32]).unwrap().is_none());
        // One flipped bit anywhere: a scan instead.
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(TableFilter::load(&path, &tables).unwrap().is_none());
        // Torn.
        bytes[mid] ^= 1;
        std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
        assert!(TableFilter::load(&path, &tables).unwrap().is_none());
        assert!(
            TableFilter::load(&dir.path().join("none"), &tables)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_saved_filter_whose_sizes_disagree_with_its_blocks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("filter");
        let f = TableFilter::new(0);
        insert_range(&f, 0..1000);
        f.set_ready();
        let tables = [7u8; 32];
        f.save(&path, &tables).unwrap();
        let saved = std::fs::read(&path).unwrap();
        // The first generation's capacity, then its count, each rewritten with a
        // valid checksum: a file another build wrote, or one crafted.
        let at = SAVED_MAGIC.len() + 32 + 16 + 4;
        for (field, value) in [
            (at, u64::MAX / 4),
            (at, MIN_CAPACITY * 2),
            (at + 8, u64::MAX),
        ] {
            let mut bytes = saved[..saved.len() - 32].to_vec();
            bytes[field..field + 8].copy_from_slice(&value.to_le_bytes());
            let sum = Sha256::digest(&bytes);
            bytes.extend_from_slice(&sum);
            std::fs::write(&path, &bytes).unwrap();
            assert!(
                TableFilter::load(&path, &tables).unwrap().is_none(),
                "field at {field} = {value} was accepted"
            );
        }
        // The untouched file still loads: the test edits the fields it means to.
        std::fs::write(&path, &saved).unwrap();
        assert!(TableFilter::load(&path, &tables).unwrap().is_some());
    }

    #[test]
    fn a_filter_saved_at_the_earlier_bits_per_entry_loads_and_grows_at_the_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("filter");
        // As an earlier release saved it: one generation at 10 bits per entry.
        let f = TableFilter::new(0);
        *f.generations.write().unwrap() =
            vec![Generation::with_bits(MIN_CAPACITY, EARLIER_BITS_PER_ENTRY)];
        insert_range(&f, 0..MIN_CAPACITY);
        f.set_ready();
        let tables = [7u8; 32];
        f.save(&path, &tables).unwrap();
        let loaded = TableFilter::load(&path, &tables).unwrap().expect("loads");
        let earlier_bytes = (MIN_CAPACITY * EARLIER_BITS_PER_ENTRY / 8) as usize;
        assert_eq!(loaded.size(), (1, earlier_bytes));
        assert!((0..MIN_CAPACITY).all(|i| loaded.may_contain(&hash(i))));
        insert_range(&loaded, MIN_CAPACITY..MIN_CAPACITY + 200_000);
        let now_bytes = (MIN_CAPACITY * BITS_PER_ENTRY / 8) as usize;
        assert_eq!(loaded.size(), (2, earlier_bytes + now_bytes));
        assert!((0..MIN_CAPACITY + 200_000).all(|i| loaded.may_contain(&hash(i))));
    }

    #[test]
    fn a_restart_sizes_one_generation_for_what_the_tables_hold() {
        let f = TableFilter::new(3 * MIN_CAPACITY);
        insert_range(&f, 0..3 * MIN_CAPACITY);
        assert_eq!(f.size().0, 1);
        f.insert_all([hash(u64::MAX)].iter());
        assert_eq!(f.size().0, 2);
    }
}
