#!/usr/bin/env bash
# Several POSIX logs in one daemon against one: `one` is a single-log daemon (a file
# without [[logs]], served at /) under one loadgen of WRITERS writers; `three` is one
# daemon serving three [[logs]] (each its own directory, key, dedup index), each under
# its own loadgen of WRITERS/3 writers, all three at once. Runs alternated (this VM
# drifts), fresh logs per run, every entry verified by its loadgen. Prints one markdown
# row per run: aggregate appends/s (the sum of the logs' checkpoint growth), tlogd CPU
# per append (utime+stime of the daemon over the run / entries appended), and the
# slowest log's share of the aggregate. `one-3lg` is the single log driven by three
# loadgens of WRITERS/3 writers (what `three` pays for three driver processes). Results go to benches/results/history.md by hand.
#
#   benches/several-logs.sh SECONDS ROUNDS [one three] [-- extra loadgen flags]
#
# WRITERS sets the total writers (default 256); LOG_TOML adds lines to every log's
# settings (`LOG_TOML='dedup.enabled = false\n'`). Needs the release binaries
# (cargo build --release --workspace --all-targets).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
bench_args "$@"
modes=("${items[@]}")
[ ${#modes[@]} -ge 1 ] || modes=(one three)
bin="$CARGO_TARGET_DIR/release"
bench_work tlogd-several-logs
writers=${WRITERS:-256}
for n in a b c; do
  "$bin/tlogd" keygen --origin "bench.example/$n" --out "$work/$n.key" > "$work/$n.vkey" 2>/dev/null
done

run() { # mode, loadgen flags...
  local mode=$1; shift
  local port dir="$work/run-$RANDOM" names=(a) per=$writers n
  mkdir -p "$dir"
  port=$(free_port)
  local drivers=(a)
  [ "$mode" = one-3lg ] && { drivers=(a a a); per=$((writers / 3)); }
  if [ "$mode" = three ]; then
    names=(a b c); per=$((writers / 3))
    { echo "listen = \"127.0.0.1:$port\""; echo "metrics.listen = \"\""
      for n in "${names[@]}"; do
        printf '[[logs]]\nname = "%s"\norigin = "bench.example/%s"\nprivate_key_file = "%s"\nstorage.dir = "%s"\n%b' \
          "$n" "$n" "$work/$n.key" "$dir/$n" "${LOG_TOML:-}"
      done; } > "$dir/tlogd.toml"
  else
    printf 'listen = "127.0.0.1:%s"\nmetrics.listen = ""\norigin = "bench.example/a"\nprivate_key_file = "%s"\nstorage.dir = "%s"\n%b' \
      "$port" "$work/a.key" "$dir/a" "${LOG_TOML:-}" > "$dir/tlogd.toml"
  fi
  "$bin/tlogd" serve --config "$dir/tlogd.toml" 2>"$work/tlogd.log" &
  local tl=$! lgs=() n
  pids+=("$tl")
  local prefix=""
  for n in "${names[@]}"; do
    [ "$mode" = three ] && prefix="/$n"
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port$prefix/checkpoint" >/dev/null && break; sleep 0.1; done
  done
  local t0; t0=$(ticks_pid "$tl")
  [ "$mode" = three ] && drivers=("${names[@]}")
  local k=0
  for n in "${drivers[@]}"; do
    [ "$mode" = three ] && prefix="/$n"
    k=$((k + 1))
    "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port$prefix" --log-public-key "$(cat "$work/$n.vkey")" \
      --writers "$per" --duration "${secs}s" --quiet --report-json "$dir/$k.json" "$@" >/dev/null &
    lgs+=($!)
  done
  for p in "${lgs[@]}"; do wait "$p" || true; done
  local t1; t1=$(ticks_pid "$tl")
  kill "$tl"; wait "$tl" 2>/dev/null || true
  python3 - "$mode" "$secs" "$((t1 - t0))" "$(getconf CLK_TCK)" "$dir" "$k" <<'PY'
import json, sys
mode, secs, ticks, hz, d, k = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
reports = [json.load(open(f"{d}/{i}.json")) for i in range(1, k + 1)]
# Loadgens sharing one log each see its whole growth: count it once.
rates = [r["tree_growth_per_s"] for r in reports] if mode == "three" else [reports[0]["tree_growth_per_s"]]
total = sum(rates)
cpu = ticks / hz * 1e6 / max(1.0, total * secs)
ok = all(r["ok"] for r in reports)
share = min(rates) / total * len(rates) if total else 0
print(f"| {mode} | {total:,.0f} | {cpu:.1f} µs | {share:.2f} | {'ok' if ok else 'FAILED'} |", flush=True)
PY
  rm -rf "$dir"
}

echo "| mode | appends/s (all logs) | tlogd CPU/append | slowest log ÷ fair share | verified |"
echo "|---|---|---|---|---|"
bench_rounds "$rounds" ${#modes[@]} "${modes[@]}" "${loadgen_args[@]}"
