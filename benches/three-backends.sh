#!/usr/bin/env bash
# Three logs on three backends in one daemon, all under load at once: POSIX, MySQL (a
# private MariaDB, durable commits) and S3 (a private MinIO), each [[logs]] entry with
# its own key, store and dedup index, each driven by its own loadgen (every entry it
# reads verified), then each checked whole by Go Tessera's fsck (v1.0.4) and by
# `tlogd verify`. Prints a markdown row per log. Results go to benches/results/history.md by hand.
#
#   benches/three-backends.sh [SECONDS, default 30] [WRITERS per log, default 64]
#
# Needs the release binaries (cargo build --release --workspace --all-targets), MinIO
# (scripts/setup.sh puts it in ~/.cache/tlogd-tools/bin), MariaDB and Go (fsck is built
# once with `go install` into $TESSERA_BIN, default ~/.cache/tlogd-tools/tessera).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
secs=${1:-30}
writers=${2:-64}
bin="$CARGO_TARGET_DIR/release"
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
tessera_tool cmd/fsck
bench_work tlogd-three-backends
start_minio
curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/three" >/dev/null
start_mariadb "$work/maria"
mariadb -h 127.0.0.1 -P "$myport" -u root -e 'CREATE DATABASE three'
port=$(free_port)
mport=$(free_port)
for n in files db bucket; do
  "$bin/tlogd" keygen --origin "bench.example/$n" --out "$work/$n.key" > "$work/$n.vkey" 2>/dev/null
done
cat > "$work/tlogd.toml" <<TOML
listen = "127.0.0.1:$port"
metrics.listen = "127.0.0.1:$mport"

[[logs]]
name = "files"
origin = "bench.example/files"
private_key_file = "$work/files.key"
storage.dir = "$work/files"

[[logs]]
name = "db"
origin = "bench.example/db"
private_key_file = "$work/db.key"
storage.backend = "mysql"
storage.url = "mysql://root@127.0.0.1:$myport/three"
dedup.path = "$work/db-dedup"

[[logs]]
name = "bucket"
origin = "bench.example/bucket"
private_key_file = "$work/bucket.key"
storage.backend = "s3"
storage.bucket = "three"
storage.region = "us-east-1"
storage.endpoint = "http://127.0.0.1:$s3port"
storage.allow_http = true
dedup.path = "$work/bucket-dedup"
TOML
"$bin/tlogd" serve --config "$work/tlogd.toml" 2>"$work/tlogd.log" &
tl=$!; pids+=("$tl")
for n in files db bucket; do
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/$n/checkpoint" >/dev/null && break; sleep 0.1; done
done
lgs=()
for n in files db bucket; do
  "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port/$n" --log-public-key "$(cat "$work/$n.vkey")" \
    --writers "$writers" --duration "${secs}s" --quiet --report-json "$work/$n.json" >/dev/null &
  lgs+=($!)
done
for p in "${lgs[@]}"; do wait "$p" || true; done
sleep 2
echo "| log | backend | appends/s | add p50 / p99 | loadgen | Go fsck | tlogd verify |"
echo "|---|---|---|---|---|---|---|"
for n in files db bucket; do
  backend=$(case $n in files) echo posix;; db) echo "mysql (MariaDB)";; bucket) echo "s3 (MinIO)";; esac)
  status=0
  "$gobin/fsck" --storage_url "http://127.0.0.1:$port/$n/" --public_key "$work/$n.vkey" --ui=false -N 8 \
    >"$work/$n.fsck" 2>&1 || status=$?
  fsck=$(fsck_verdict "$work/$n.fsck" "$status")
  if "$bin/tlogd" verify "http://127.0.0.1:$port/$n" --log-public-key "$(cat "$work/$n.vkey")" >"$work/$n.verify" 2>&1
  then verify=$(head -1 "$work/$n.verify" | cut -c1-60); else verify="FAILED ($(tail -1 "$work/$n.verify" | cut -c1-120))"; fi
  python3 - "$work/$n.json" "$n" "$backend" "$fsck" "$verify" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); n, backend, fsck, verify = sys.argv[2:6]
ops = {o["operation"]: o for o in r["operations"]}
add = ops["add (time in queue)"]
ok = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:200]
print(f"| {n} | {backend} | {r['tree_growth_per_s']:,.0f} | {add['p50_ms']:.1f} / {add['p99_ms']:.1f} ms | {ok} | {fsck} | {verify} |")
PY
done
kill "$tl"; wait "$tl" 2>/dev/null || true
