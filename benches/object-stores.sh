#!/usr/bin/env bash
# tlogd on an object store, on this machine, with the loadgen (every entry verified):
# one frontend on a private MinIO bucket (S3 API), then the same with 20 ms of latency
# added to every store request by Toxiproxy; appends/s, CPU per append of tlogd and of
# MinIO from /proc, add latency. Results go to benches/results/history.md by hand.
#
#   benches/object-stores.sh [seconds per run, default 20] [writers, default 256] [http1|h2c, default http1]
#
# Needs the release binaries (cargo build --release -p tlogd -p tlog-loadgen), MinIO and
# Toxiproxy from `scripts/deps.sh test` (~/.cache/tlogd-tools/bin), and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
secs="${1:-20}"
writers="${2:-256}"
proto="${3:-http1}"
# h2c: by default one connection per 100 writers (the daemon allows 100 streams each).
h2c=(); [ "$proto" = h2c ] && h2c=(--h2c --h2c-connections "${H2C_CONNECTIONS:-0}")
bin="$CARGO_TARGET_DIR/release"
tlogd_bin="${TLOGD_BIN:-$bin/tlogd}"
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
source benches/lib.sh
bench_work tlogd-objbench

"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

# MinIO, one drive in a temporary directory (ext4), its defaults (fsync'd writes).
start_minio
# Toxiproxy in front of it.
tport=$(free_port)
"$tools/toxiproxy-server" -host 127.0.0.1 -port "$tport" >"$work/toxiproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$tport/version" >/dev/null && break; sleep 0.1; done
pport=$(free_port)
curl -sf -X POST "http://127.0.0.1:$tport/proxies" \
  -d "{\"name\":\"minio\",\"listen\":\"127.0.0.1:$pport\",\"upstream\":\"127.0.0.1:$s3port\"}" >/dev/null

run() { # endpoint-port label
  local port=$1 label=$2 bucket="b$RANDOM"
  curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/$bucket" >/dev/null
  local lport; lport=$(free_port)
  "$tlogd_bin" serve --backend s3 --bucket "$bucket" --region us-east-1 --endpoint "http://127.0.0.1:$port" \
    --allow-http --origin bench.example/log --private-key-file "$work/key" --listen "127.0.0.1:$lport" \
    --metrics-listen "" --no-dedup 2>"$work/tlogd.log" &
  local tl=$!; pids+=($tl)
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$lport/checkpoint" >/dev/null && break; sleep 0.1; done
  local t0 s0; t0=$(ticks_pid "$tl"); s0=$(ticks_pid "$minio")
  "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$lport" --log-public-key "$(cat "$work/vkey")" \
    --writers "$writers" "${h2c[@]}" --duration "$secs" --quiet --report-json "$work/r.json" >/dev/null
  local t1 s1; t1=$(ticks_pid "$tl"); s1=$(ticks_pid "$minio")
  kill "$tl"; wait "$tl" 2>/dev/null || true
  python3 - "$work/r.json" "$label" $((t1 - t0)) $((s1 - s0)) "$(getconf CLK_TCK)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); label = sys.argv[2]
tl, sv, hz = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
adds = r["writes_new"] + r["writes_duplicate"]
ops = {o["operation"]: o for o in r["operations"]}
add = ops.get("add (time in queue)", {})
tti = ops.get("time to integrate", {})
f = lambda o, k: o.get(k, float("nan"))
print(f"| {label} | {r['tree_growth_per_s']:,.0f} | {tl / hz / adds * 1e6:.1f} µs | {sv / hz / adds * 1e6:.1f} µs | "
      f"{f(add,'p50_ms'):.1f} / {f(add,'p99_ms'):.1f} / {f(add,'max_ms'):.0f} ms | {f(tti,'p50_ms'):.0f} / {f(tti,'p99_ms'):.0f} ms | ok={r['ok']} |")
PY
}

echo "| setup ($writers writers, $proto) | appends/s (tree growth) | tlogd CPU/append | MinIO CPU/append | add p50 / p99 / max | time-to-integrate p50 / p99 | |"
echo "|---|---|---|---|---|---|---|"
[ -z "${ONLY_LATENCY:-}" ] && run "$s3port" "MinIO, direct"
[ -z "${ONLY_LATENCY:-}" ] && run "$pport" "MinIO through Toxiproxy"
curl -sf -X POST "http://127.0.0.1:$tport/proxies/minio/toxics" \
  -d '{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":20,"jitter":0}}' >/dev/null
run "$pport" "MinIO + 20 ms per request"
