#!/usr/bin/env bash
# Several busy frontends on one bucket (issue "Never logged twice", item 6): one
# frontend alone, then two both taking adds (the loadgen's writes round-robin), on a
# private MinIO, alternated for several sittings (this machine drifts). Prints
# appends/s, each frontend's share of the acknowledged adds, add latency, and object
# writes (PUT + conditional PUT, from each tlogd's /metrics) per committed entry.
# Every entry is verified by the loadgen. Results go to benches/results/history.md by hand.
#
#   benches/frontends.sh [seconds per run, default 20] [writers, default 512] [sittings, default 2]
#
# TURN_MS sets `storage.turn_ms` (0: no turns, the behaviour before them). Each sitting
# also runs two frontends with the second forwarding its batches to the first
# (`[forward]`), unless FORWARD=0.
# Needs the release binaries (cargo build --release -p tlogd -p tlog-loadgen) and MinIO
# from `scripts/deps.sh test` (~/.cache/tlogd-tools/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
secs="${1:-20}"
writers="${2:-512}"
sittings="${3:-2}"
bin="$CARGO_TARGET_DIR/release"
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
source benches/lib.sh
bench_work tlogd-frontends

"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

start_minio

# Object writes (put + put_if requests) a tlogd made, from its metrics.
writes_of() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk '
    /^tlogd_storage_op_duration_seconds_count\{/ && /op="put(_if)?"/ { n += $NF }
    END { printf "%d\n", n }'
}
# Adds a tlogd answered with an index.
adds_of() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk '
    /^tlogd_add_requests_total\{/ && /outcome="(ok|new|duplicate|logged)"/ { n += $NF }
    END { printf "%d\n", n }'
}

echo "frontends-secret" > "$work/forward.token"

run() { # frontends label [forward: the others forward to the first]
  local n=$1 label=$2 forward=${3:-} bucket="b$RANDOM$RANDOM"
  curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/$bucket" >/dev/null
  local urls=() tl=() mports=() first=""
  for i in $(seq "$n"); do
    local port mport fw=""; port=$(free_port); mport=$(free_port)
    if [ -n "$forward" ]; then
      fw=$'[forward]\n'"token_file = \"$work/forward.token\""
      [ -n "$first" ] && fw+=$'\n'"to = \"$first\""
    fi
    [ -z "$first" ] && first="http://127.0.0.1:$port"
    cat > "$work/tlogd-$i.toml" <<EOF
origin = "bench.example/log"
listen = "127.0.0.1:$port"
private_key_file = "$work/key"
[storage]
backend = "s3"
bucket = "$bucket"
region = "us-east-1"
endpoint = "http://127.0.0.1:$s3port"
allow_http = true
turn_ms = ${TURN_MS:-250}
[dedup]
enabled = false
[metrics]
listen = "127.0.0.1:$mport"
$fw
EOF
    "$bin/tlogd" serve --config "$work/tlogd-$i.toml" 2>"$work/tlogd-$i.log" &
    tl+=($!); pids+=($!); mports+=("$mport")
    urls+=(--write-log-url "http://127.0.0.1:$port")
    for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  done
  local w0=0; for m in "${mports[@]}"; do w0=$((w0 + $(writes_of "$m"))); done
  "$bin/tlog-loadgen" --log-url "${urls[1]}" "${urls[@]}" --log-public-key "$(cat "$work/vkey")" \
    --writers "$writers" --duration "$secs" --quiet --report-json "$work/r.json" >/dev/null
  local w1=0 shares=(); for m in "${mports[@]}"; do w1=$((w1 + $(writes_of "$m"))); shares+=("$(adds_of "$m")"); done
  for p in "${tl[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  python3 - "$work/r.json" "$label" $((w1 - w0)) "${shares[*]}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); label = sys.argv[2]; writes = int(sys.argv[3])
adds = r["writes_new"] + r["writes_duplicate"]
ops = {o["operation"]: o for o in r["operations"]}
add = ops.get("add (time in queue)", {})
f = lambda o, k: o.get(k, float("nan"))
share = " / ".join(f"{int(s):,}" for s in sys.argv[4].split())
print(f"| {label} | {r['tree_growth_per_s']:,.0f} | {share} | {f(add,'p50_ms'):.1f} / {f(add,'p99_ms'):.1f} / {f(add,'max_ms'):.0f} ms | "
      f"{writes / max(adds, 1):.3f} | errors={r.get('write_errors', 0)} ok={r['ok']} |")
PY
}

echo "| setup ($writers writers, ${secs} s, turn ${TURN_MS:-250} ms) | appends/s (tree growth) | adds per frontend | add p50 / p99 / max | object writes per entry | |"
echo "|---|---|---|---|---|---|"
for s in $(seq "$sittings"); do
  run 1 "MinIO, 1 frontend (sitting $s)"
  run 2 "MinIO, 2 frontends (sitting $s)"
  [ "${FORWARD:-1}" = 0 ] || run 2 "MinIO, 2 frontends, forwarding (sitting $s)" forward
done
