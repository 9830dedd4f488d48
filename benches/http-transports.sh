#!/usr/bin/env bash
# tlogd on POSIX (the embedded default; dedup off, to measure the HTTP path) under the
# loadgen over HTTP/1.1 (one keep-alive connection per writer) and over h2c (all writers
# multiplexed on one HTTP/2 connection), runs alternated so that the machine's drift
# hits both alike; fresh log per run, every entry verified. Prints one markdown row per
# run: appends/s, tlogd CPU per append (utime+stime from /proc/PID/stat, sampled by the
# loadgen's --log-pid), the loadgen's own CPU per add, add latency, time to integrate
# and the verification backlog. Results go to benches/results/history.md by hand.
#
#   benches/http-transports.sh [seconds per run, default 20] [pairs, default 4] [extra loadgen flags...]
#
# Needs the release binaries (cargo build --release -p tlogd -p tlog-loadgen).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
secs="${1:-20}"
pairs="${2:-4}"
shift $(($# > 2 ? 2 : $#))
bin="$CARGO_TARGET_DIR/release"
source benches/lib.sh
bench_work tlogd-httpbench

"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

run() { # label, loadgen flags...
  local label=$1; shift
  local port dir="$work/log-$RANDOM"
  port=$(free_port)
  "$bin/tlogd" serve --storage-dir "$dir" --origin bench.example/log --private-key-file "$work/key" \
    --listen "127.0.0.1:$port" --metrics-listen "" --no-dedup 2>"$work/tlogd.log" &
  local tl=$!
  pids+=("$tl")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
    --writers 256 --duration "${secs}s" --log-pid "$tl" --probe-dir "$dir" --quiet \
    --report-json "$work/r.json" "$@" >/dev/null || true
  kill "$tl"; wait "$tl" 2>/dev/null || true
  rm -rf "$dir"
  python3 - "$work/r.json" "$label" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); label = sys.argv[2]
ops = {o["operation"]: o for o in r["operations"]}
add, tti = ops["add (time in queue)"], ops["time to integrate"]
st = r["machine"].get("storage") or {}
verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:300]
print(f"| {label} | {r['tree_growth_per_s']:,.0f} | {r['log_cpu_us_per_add']:.1f} µs | {r['loadgen_cpu_us_per_add']:.1f} µs | "
      f"{add['p50_ms']:.1f} / {add['p99_ms']:.1f} ms | {tti['p50_ms']:.0f} / {tti['p99_ms']:.0f} ms | "
      f"{r['verify_backlog_max']:,} / {r['verify_drain_seconds']:.1f} s | {st.get('fsync_p50_us', 0)} / {st.get('fsync_p99_us', 0)} µs | {verdict} |")
EOF
}

echo "| transport | appends/s | tlogd CPU/append | loadgen CPU/add | add p50 / p99 | time to integrate p50 / p99 | verify backlog max / drain | fsync p50 / p99 | |"
echo "|---|---|---|---|---|---|---|---|---|"
for i in $(seq "$pairs"); do
  # Alternate which goes first, so neither always runs on the warmer (or later) machine.
  if [ $((i % 2)) -eq 1 ]; then
    run "HTTP/1.1" "$@"; run "h2c" --h2c "$@"
  else
    run "h2c" --h2c "$@"; run "HTTP/1.1" "$@"
  fi
done
