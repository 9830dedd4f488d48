#!/usr/bin/env bash
# Readers against commits (#35): appends/s and add p99 of one tlogd frontend under the
# loadgen (256 writers, every entry verified), alone, next to ~2,000 reads/s, and next
# to an unthrottled flood of reads, each read a `GET /checkpoint` or a tile beyond the
# tree (h2load, h2c, from Debian's nghttp2-client). For each backend asked (posix,
# postgres, mysql, s3 = MinIO) and each binary given, interleaved. Results go to
# benches/results/history.md by hand.
#
#   benches/reads-vs-commits.sh SECONDS ROUNDS LABEL=BINARY... [-- BACKEND...]
#   e.g. benches/reads-vs-commits.sh 10 1 old=/tmp/tlogd-old new=/tmp/tlogd-new -- postgres mysql s3 posix
#
# Needs the release loadgen (cargo build --release -p tlog-loadgen), h2load, and the
# packages and tools of `scripts/deps.sh test` (PostgreSQL, MariaDB, MinIO). Runs as
# root (PostgreSQL as the postgres user).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bin="$CARGO_TARGET_DIR/release"
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
source benches/lib.sh
# The binaries are the items; what follows `--` names the backends.
bench_args "$@"
binaries=("${items[@]}")
backends=("${loadgen_args[@]}")
[ ${#backends[@]} -gt 0 ] || backends=(postgres mysql s3 posix)
bench_work tlogd-readbench
chmod 755 "$work"
command -v h2load >/dev/null || { echo "h2load is missing: apt-get install nghttp2-client" >&2; exit 1; }

"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

for b in "${backends[@]}"; do
  case $b in
    postgres) start_postgres ;;
    mysql) start_mariadb "$work/my" ;;
    s3) start_minio ;;
    posix) ;;
    *) echo "unknown backend $b" >&2; exit 1 ;;
  esac
done

# Start a frontend of backend $2 with binary $1 on a fresh database/bucket/directory;
# sets `tl` (its pid) and `port`.
start_tlogd() {
  local binary=$1 backend=$2 name="b$RANDOM$RANDOM" args=()
  case $backend in
    postgres) psql -q -h 127.0.0.1 -p "$pgport" -U postgres -c "create database $name"
              args=(--backend postgres --database-url "postgres://postgres@127.0.0.1:$pgport/$name") ;;
    mysql) mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database $name"
           args=(--backend mysql --database-url "mysql://root@127.0.0.1:$myport/$name") ;;
    s3) curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/$name" >/dev/null
        args=(--backend s3 --bucket "$name" --region us-east-1 --endpoint "http://127.0.0.1:$s3port" --allow-http) ;;
    posix) args=(--backend posix --storage-dir "$work/$name") ;;
  esac
  port=$(free_port)
  "$binary" serve "${args[@]}" --origin bench.example/log --private-key-file "$work/key" \
    --listen "127.0.0.1:$port" --metrics-listen "" --no-dedup 2>"$work/tlogd.log" &
  tl=$!; pids+=($tl)
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
}

# One run: binary label $1, binary $2, backend $3, reads $4 (none, 2000 = ~2,000/s, flood).
run() {
  local label=$1 binary=$2 backend=$3 reads=$4 h2=
  start_tlogd "$binary" "$backend"
  local urls=("http://127.0.0.1:$port/checkpoint" "http://127.0.0.1:$port/tile/entries/x999/999")
  case $reads in
    none) ;;
    # 8 clients at 250 requests/s each, up to 64 in flight each: a path beyond the
    # tree on a shared store waits up to ~100 ms for a checkpoint read begun after it
    # arrived, so requests in flight (not the rate) would limit fewer.
    2000) h2load -c 8 -t 1 -m 64 --rps 250 -D "$((secs + 2))" "${urls[@]}" >"$work/h2load.txt" 2>&1 & h2=$! ;;
    flood) h2load -c 16 -t 1 -m 16 -D "$((secs + 2))" "${urls[@]}" >"$work/h2load.txt" 2>&1 & h2=$! ;;
  esac
  "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
    --writers 256 --duration "$secs" --quiet --report-json "$work/r.json" >/dev/null || true
  [ -n "$h2" ] && { wait "$h2" || true; }
  kill "$tl"; wait "$tl" 2>/dev/null || true
  local rps=0
  [ -n "$h2" ] && rps=$(awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) { print $(i-1); exit } }' "$work/h2load.txt")
  python3 - "$work/r.json" "$label" "$backend" "$reads" "$rps" "$work/rows.jsonl" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); label, backend, reads, rps, rows = sys.argv[2:7]
ops = {o["operation"]: o for o in r["operations"]}
add = ops.get("add (time in queue)", {})
verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:200]
open(rows, "a").write(json.dumps([label, backend, reads, r["tree_growth_per_s"], add.get("p99_ms", float("nan")), float(rps or 0)]) + "\n")
print(f"| {label} | {backend} | {reads} | {float(rps or 0):,.0f} | {r['tree_growth_per_s']:,.0f} | {add.get('p50_ms', float('nan')):.1f} / {add.get('p99_ms', float('nan')):.1f} ms | {verdict} |", flush=True)
EOF
}

echo "| binary | backend | reads | reads/s served | appends/s | add p50 / p99 | |"
echo "|---|---|---|---|---|---|---|"
for i in $(seq "$rounds"); do
  for b in "${backends[@]}"; do
    for reads in none 2000 flood; do
      n=${#binaries[@]}
      for j in $(seq 0 $((n - 1))); do
        pair=${binaries[$(((i - 1 + j) % n))]}
        run "${pair%%=*}" "${pair#*=}" "$b" "$reads"
      done
    done
  done
done
# Per binary and backend: what ~2,000 reads/s and the flood left of the appends/s and
# what they added to the add p99, against the same binary's runs without readers.
python3 - "$work/rows.jsonl" <<'EOF'
import json, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, backend, reads, rate, p99, rps = json.loads(line)
    runs[(label, backend, reads)].append((rate, p99))
mean = lambda xs: sum(xs) / len(xs)
print()
print("| binary | backend | appends/s kept at ~2,000 reads/s | add p99 change | kept under the flood |")
print("|---|---|---|---|---|")
for (label, backend, reads) in sorted(k for k in runs if k[2] == "none"):
    base = runs[(label, backend, "none")]
    r0, p0 = mean([r for r, _ in base]), mean([p for _, p in base])
    some = runs.get((label, backend, "2000"), [(float("nan"), float("nan"))])
    flood = runs.get((label, backend, "flood"), [(float("nan"), float("nan"))])
    r1, p1 = mean([r for r, _ in some]), mean([p for _, p in some])
    r2 = mean([r for r, _ in flood])
    print(f"| {label} | {backend} | {r1 / r0:.0%} | {p1 / p0 - 1:+.0%} | {r2 / r0:.0%} |")
EOF
