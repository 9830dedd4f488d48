#!/usr/bin/env bash
# Priority under load (#60): tlogd's CT personality on POSIX with `[ct]
# priority_high_water` off and on, under the loadgen's CT mode offering far more than
# the log takes (WRITERS writers, default 1024) in a mix of 10 % fresh
# precertificates, 60 % certificates carrying SCTs and 30 % certificates issued 400
# days ago; a writer refused (429/503) waits its Retry-After and moves on to its next
# chain. Before them, an unloaded run of precertificates only (8 writers) gives their
# add p99 alone. Prints each class's acceptance and add latency per run.
#
#   benches/ct-priority.sh SECONDS ROUNDS [HIGH_WATER]   (e.g. 20 3 256)
#
# CT_WARMUP (default 0): the adds answered in the run's first this-long (e.g. 2s: the
# storm of 1024 writers connecting and sending at once) are left out of the latencies
# (the loadgen's --latency-warmup); the counts include them.
#
# CT_CHAINS (default 60000): chains minted per run; make it at least what a run sends
# (its adds/s times SECONDS), or writers cycle back and send duplicates, which are
# answered from the SCT cache before any priority applies.
#
# Needs release builds of tlogd and tlog-loadgen, openssl, jq.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
secs=${1:?seconds per run}
rounds=${2:?rounds}
high=${3:-256}
writers=${WRITERS:-1024}
bin="$CARGO_TARGET_DIR/release"
bench_work ct-priority
origin=bench.ct.example/2026
openssl ecparam -name prime256v1 -genkey -noout -out "$work/key.pem" 2>/dev/null
chmod 600 "$work/key.pem"
pubkey=$(openssl ec -in "$work/key.pem" -pubout -outform DER 2>/dev/null | base64 -w0)
"$bin/tlog-loadgen" ct-root --cert "$work/root.pem" --key "$work/root-key.pem" >/dev/null

run() { # label high_water writers loadgen-mix-flags...
  local label=$1 hw=$2 w=$3; shift 3
  local port dir="$work/log-$RANDOM"
  port=$(free_port)
  mkdir -p "$dir"
  printf 'listen = "127.0.0.1:%s"\norigin = "%s"\nprivate_key_file = "%s"\n[storage]\ndir = "%s"\n[metrics]\nlisten = ""\n[ct]\nroots_file = "%s"\npriority_high_water = %s\n' \
    "$port" "$origin" "$work/key.pem" "$dir/log" "$work/root.pem" "$hw" > "$dir/tlogd.toml"
  RUST_LOG=error "$bin/tlogd" serve --config "$dir/tlogd.toml" 2>"$dir/tlogd.log" &
  local tl=$!
  pids+=("$tl")
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  rm -f "$work/r.json"
  "$bin/tlog-loadgen" --ct --log-url "http://127.0.0.1:$port/" --origin "$origin" --log-public-key "$pubkey" \
    --ct-root-cert "$work/root.pem" --ct-root-key "$work/root-key.pem" --ct-chains "${CT_CHAINS:-60000}" \
    --writers "$w" --duration "${secs}s" --latency-warmup "${CT_WARMUP:-0}" --log-pid "$tl" --quiet \
    --report-json "$work/r.json" "$@" >/dev/null || true
  kill "$tl"; wait "$tl" 2>/dev/null || true
  rm -rf "$dir"
  [ -f "$work/r.json" ] || { echo "| $label | (no report) |"; return; }
  jq -r --arg l "$label" '.ct_classes[] | "| \($l) | \(.class) | \(.sent) | \(.acked) (\((100*.acked/(if .sent==0 then 1 else .sent end))|floor) %) | \(.pushback) | \(.add_p50_ms) / \(.add_p99_ms) ms |"' "$work/r.json"
}

echo "unpinned; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +'%F %H:%M UTC'); high water $high, $writers writers, latency warm-up ${CT_WARMUP:-0}"
echo "| run | class | sent | acknowledged | pushback | add p50 / p99 |"
echo "|---|---|---|---|---|---|"
run "unloaded" 0 8 --ct-precert-chance 1
mix=(--ct-precert-chance 0.1 --ct-scts-chance 0.6 --ct-old-chance 0.3)
for r in $(seq "$rounds"); do
  run "off, round $r" 0 "$writers" "${mix[@]}"
  run "on, round $r" "$high" "$writers" "${mix[@]}"
done
