#!/usr/bin/env bash
# Where tlogd's CPU goes per append, by stage: tlogd on POSIX under the loadgen (256
# writers, HTTP/1.1 unless the loadgen flags say otherwise, every entry verified),
# `perf record -F 999` of the tlogd process for 12 s in the middle of a 30 s run, every
# sample sorted into a stage by its thread and symbol, and each stage's share turned
# into µs per append (samples / 999 Hz / entries appended during the recording).
# Prints a markdown table; results go to benches/results/history.md by hand.
#
#   benches/profile.sh [label, default tlogd] [extra tlogd serve flags...]
#   TLOGD_BIN=/tmp/tlogd-old LGFLAGS=--h2c benches/profile.sh old --no-dedup
#   PROFILE_BACKEND=mysql PROFILE_WRITERS=1024 benches/profile.sh mysql
#
# PIN=1 puts tlogd on core 1 and the loadgen (and MariaDB) on core 0 (benches/lib.sh).
#
# PROFILE_BACKEND=mysql serves from a private MariaDB (durable commits, as
# benches/vs-tessera.sh mysql) instead of POSIX files; PROFILE_WRITERS sets the
# loadgen's writers (default 256).
#
# PROFILE_CT=rsa2048|p256|p384 profiles a CT log instead (static-ct-api, dedup on):
# the loadgen's CT mode (--ct, 10 % precertificates, 5 % duplicates, one random
# reader) with chains whose intermediate has that key, and stages for the signature
# checks (aws-lc-rs, ring, RustCrypto), X.509/DER parsing and JSON/base64.
#   PROFILE_CT=rsa2048 PROFILE_WRITERS=128 benches/profile.sh ct-rsa
# A CT run lasts 24 s and records from 5 s after its first entry, so that its 400,000
# chains (minted first, not timed) last past the recording at up to ~23k adds/s: a pool
# used up turns the rest of the run into resubmissions (the script warns when the pool
# ran out before the run ended). Minting is waited for while the loadgen runs (at most
# PROFILE_START_WAIT seconds, default 3600); a run with no entry fails.
# PROFILE_CT_CHAINS=N mints N chains instead of 400,000; writers cycle through them, so
# with a small N (2000) nearly every add is a resubmission answered from the SCT cache,
# and the table is per answer (the loadgen's acknowledged rate over the recording)
# rather than per append:
#   PROFILE_CT=rsa2048 PROFILE_CT_CHAINS=2000 PROFILE_WRITERS=128 \
#     LGFLAGS="--verify-fraction 0" benches/profile.sh dups
# (without --verify-fraction 0 the loadgen re-reads a full data tile for each
# resubmission it samples, and tlogd's CPU for serving those counts per answer).
#
# Needs perf (linux-perf) and the release binaries (cargo build --release --workspace
# --all-targets). The stages are heuristics over symbol names: good for before/after on
# one machine, not an exact accounting.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
label="${1:-tlogd}"
shift $(($# > 0 ? 1 : 0))
bin="$CARGO_TARGET_DIR/release"
tlogd="${TLOGD_BIN:-$bin/tlogd}"
source benches/lib.sh
bench_work tlogd-profile "${PROFILE_KEEP_DIR:-}"
port=$(free_port)
"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null
ct_flags=()
duration=30s warmup=10
if [ -n "${PROFILE_CT:-}" ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$work/ct-key.pem" 2>/dev/null
  chmod 600 "$work/ct-key.pem"
  "$bin/tlog-loadgen" ct-root --cert "$work/root.pem" --key "$work/root-key.pem" >/dev/null
  openssl ec -in "$work/ct-key.pem" -pubout -outform DER 2>/dev/null | base64 -w0 > "$work/vkey"
  printf 'listen = "127.0.0.1:%s"\norigin = "bench.example/log"\nprivate_key_file = "%s"\n[storage]\ndir = "%s"\n[metrics]\nlisten = ""\n[ct]\nroots_file = "%s"\n' \
    "$port" "$work/ct-key.pem" "$work/log" "$work/root.pem" > "$work/ct.toml"
  # PROFILE_BATCH_AGE_MS: the integrator lingers that long for more entries ([batching]).
  [ -z "${PROFILE_BATCH_AGE_MS:-}" ] || printf '[batching]\nmax_age_ms = %s\n' "$PROFILE_BATCH_AGE_MS" >> "$work/ct.toml"
  duration=24s warmup=5
  ct_flags=(--ct --origin bench.example/log --ct-root-cert "$work/root.pem" --ct-root-key "$work/root-key.pem"
    --ct-issuer-key "$PROFILE_CT" --ct-chains "${PROFILE_CT_CHAINS:-400000}" --ct-precert-chance 0.1 --dup-chance 0.05
    --readers-full 1 --readers-random 0)
fi
if [ "${PROFILE_BACKEND:-posix}" = mysql ]; then
  start_mariadb "$work/my"
  mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database bench"
  storage=(--backend mysql --database-url "mysql://root@127.0.0.1:$myport/bench" --dedup-path "$work/dedup")
else
  storage=(--storage-dir "$work/log")
fi
if [ -n "${PROFILE_CT:-}" ]; then
  "${on_server_core[@]}" "$tlogd" serve --config "$work/ct.toml" "$@" 2>"$work/tlogd.log" &
else
  "${on_server_core[@]}" "$tlogd" serve "${storage[@]}" --origin bench.example/log --private-key-file "$work/key" \
    --listen "127.0.0.1:$port" --metrics-listen "" "$@" 2>"$work/tlogd.log" &
fi
tl=$!
pids+=("$tl")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
read -r -a lgflags <<< "${LGFLAGS:-}"
"${on_driver_core[@]}" "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
  --writers "${PROFILE_WRITERS:-256}" --duration "$duration" --log-pid "$tl" --quiet --report-json "$work/r.json" \
  "${ct_flags[@]}" "${lgflags[@]}" >/dev/null &
lg=$!
pids+=("$lg")
size() { curl -sf "http://127.0.0.1:$port/checkpoint" | sed -n 2p; }
# A CT run mints its chains first (not timed): wait for its first entries while the
# loadgen lives. 400,000 RSA-2048 chains took longer than 300 s on one pinned core of an
# Intel Xeon (2026-11-29), and a fixed wait then recorded an idle process.
for _ in $(seq "${PROFILE_START_WAIT:-3600}"); do
  [ "$(size || echo 0)" -gt 0 ] && break
  kill -0 "$lg" 2>/dev/null || break
  sleep 1
done
if [ "$(size || echo 0)" -eq 0 ]; then
  echo "profile.sh: no entry was appended (loadgen exited or PROFILE_START_WAIT=${PROFILE_START_WAIT:-3600} s passed; PROFILE_KEEP_DIR=DIR keeps tlogd.log)" >&2
  exit 1
fi
sleep "$warmup"
# tlogd's CPU ticks (utime + stime, /proc) over the recording, beside the samples.
ticks() { awk '{print $14 + $15}' "/proc/$tl/stat"; }
s0=$(size) t0=$(ticks)
perf record -F 999 ${PROFILE_PERF_FLAGS:-} -p "$tl" -o "$work/perf.data" -- sleep 12 >/dev/null 2>&1
s1=$(size) t1=$(ticks)
wait "$lg" || true
perf report -i "$work/perf.data" --no-children --sort comm,dso,sym 2>/dev/null | tee "${KEEP_REPORT:-/dev/null}" | grep '%' > "$work/report.txt"
samples=$(perf script -i "$work/perf.data" -F comm 2>/dev/null | wc -l)
python3 - "$work/report.txt" "$samples" $((s1 - s0)) "$label" "$work/r.json" "${PROFILE_CT_CHAINS:-}" $((t1 - t0)) "$(getconf CLK_TCK)" <<'PY'
import collections, json, re, sys
report, samples, entries, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
window_cpu_s = int(sys.argv[7]) / int(sys.argv[8])
r = json.load(open(sys.argv[5]))
if sys.argv[6]:
    # Resubmissions do not grow the tree: count the answers (12 s at the run's rate).
    entries = int(r['write_rate_per_s'] * 12)
total = samples / 999 * 1e6 / max(entries, 1)
if not sys.argv[6] and r.get('ct_chains_minted') and r['writes_new'] >= r['ct_chains_minted']:
    # Past the pool, adds are resubmissions: answered, never appended.
    print(f"warning: all {r['ct_chains_minted']:,} chains were appended before the run ended; "
          "if that was inside the recording, resubmissions inflate the figures per append")
NET = r'tcp|inet|skb|ip_|sock|softirq|net_|__dev|loopback|_copy_to_iter|_copy_from_iter|sendmsg|recvmsg|writev|readv|recvfrom|bbr|process_backlog|sk_|fdget|do_syscall|irqentry|kmem|slab'
SCHED = r'task_switch|schedule|futex|spin_unlock|wake|enqueue|dequeue|pick_next|update_curr|switch'
DISK = r'ext4|jbd2|fsync|sync|blk|virtio|iowrite|bio|page|folio|filemap|d_lookup|fscrypt|inode|dentry|find_get_block'
def stage(comm, dso, kernel, sym):
    if comm.startswith('rocksdb'): return 'dedup index: RocksDB flush and compaction threads'
    if 'rocksdb' in sym or dso.startswith('libstdc'): return 'dedup index: RocksDB lookups and inserts'
    if re.search(r'malloc|_int_free|cfree|unlink_chunk|consolidate|realloc|^_?mi_', sym): return 'allocator'
    if re.search(r'aws_lc|ring_core|nistz|ring::|bn_mul_mont|bn_sqr|p256_point|LIMBS_|GFp_|bignum_', sym): return 'signatures: aws-lc-rs, ring (chain verification, SCT signing)'
    if re.search(r'p256::|p384::|p521::|primeorder|elliptic_curve|num_bigint|rsa::|ed25519|curve25519', sym): return 'signatures: RustCrypto'
    if 'sha2' in sym: return 'hashing (SHA-256)'
    # `\bder::`: the `der` crate, not `Builder::` or `Encoder::`.
    if re.search(r'tlogd_ct::chain|tlogd_ct::der|x509_parser|asn1_rs|der_parser|\bder::', sym): return 'X.509/DER parsing and chain policy'
    if re.search(r'serde_json|base64|serde::', sym): return 'JSON and base64'
    if re.search(r'hyper|h2::|http::|httparse|http_body|axum|tower', sym): return 'HTTP parse/route/respond (hyper, axum)'
    if 'metrics' in sym: return 'metrics'
    if re.search(r'tlogd::serve::|tlogd::client::', sym): return "tlogd's HTTP server: connections, budgets, deadlines"
    if re.search(r'clock_gettime|read_tsc|Instant', sym): return 'clock reads'
    if re.search(r'sqlx|mysql', sym): return 'SQL backend (sqlx, MySQL protocol)'
    if 'tokio' in sym: return 'tokio: task scheduling, timers, I/O readiness'
    if kernel:
        if re.search(NET, sym): return 'kernel: sockets and syscalls'
        if re.search(SCHED, sym): return 'kernel: scheduling, futex wake-ups'
        if re.search(DISK, sym): return 'kernel: commit I/O (files, fsync)'
        return 'kernel: other'
    if comm == 'tlogd-engine': return 'engine thread: queue, integrate, commit (user)'
    if re.search(r'memmove|memcpy|memcmp|memset', sym): return 'memcpy/memcmp'
    return 'other user space'
shares = collections.Counter()
for line in open(report):
    m = re.match(r'\s*([\d.]+)%\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(.*)', line)
    if m:
        shares[stage(m[2], m[3], m[4] == 'k', m[5])] += float(m[1])
unit = 'answers' if sys.argv[6] else 'appends'
rate = r['write_rate_per_s'] if sys.argv[6] else r['tree_growth_per_s']
print(f"{label}: {rate:,.0f} {unit}/s over the run, tlogd {r['log_cpu_us_per_add']:.1f} µs CPU/append "
      f"(/proc), loadgen {r['loadgen_cpu_us_per_add']:.1f} µs/add; profile: {samples} samples over {entries:,} {unit} = {total:.1f} µs each; "
      f"/proc over the recording: {window_cpu_s * 1e6 / max(entries, 1):.1f} µs each")
print(f"| stage | share | µs per {unit[:-1]} |")
print("|---|---|---|")
for k, v in shares.most_common():
    print(f"| {k} | {v:.1f} % | {v * total / 100:.2f} |")
PY
