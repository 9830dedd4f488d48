#!/usr/bin/env bash
# Two or more tlogd variants on POSIX under the loadgen (256 writers, HTTP/1.1
# keep-alive unless the loadgen flags say otherwise), runs alternated so that this
# machine's drift hits every variant alike; fresh log per run, every entry verified.
# Prints one markdown row per run and the mean of each variant: appends/s, tlogd CPU per
# append (utime+stime from /proc/PID/stat, sampled by the loadgen's --log-pid), the
# loadgen's own CPU per add, add latency, time to integrate. Results go to
# benches/results/history.md by hand.
#
#   benches/ab.sh SECONDS ROUNDS VARIANT VARIANT... [-- extra loadgen flags]
#
# A variant is `label=binary[,NAME=VALUE...][,--serve-flag...][,loadgen=BINARY]`: the
# tlogd binary to run (an old build copied aside, say; empty for this tree's release
# build), environment for it, flags of its own for `tlogd serve`, and the loadgen
# binary driving it (this tree's by default). `label` alone runs this tree's release
# builds. TLOGD_FLAGS adds flags to every `tlogd serve` (dedup is on unless it says
# `--no-dedup`). Examples:
#
#   benches/ab.sh 20 4 old=/tmp/tlogd-old new                # two builds
#   benches/ab.sh 15 3 shared=,TLOGD_ENGINE_SHARED=1 own      # the engine's own thread
#   TLOGD_FLAGS=--no-dedup benches/ab.sh 20 4 a b -- --h2c
#   benches/ab.sh 15 3 dedup no-dedup=,--no-dedup             # what the index costs
#   benches/ab.sh 20 4 lg-old=,loadgen=/tmp/loadgen-old lg-new  # two loadgen builds
#   AB_LOG_DIR=/var/tmp/scale benches/ab.sh 40 3 old=/tmp/tlogd-old new  # on a big log
#
# AB_COMMITS=1 scrapes tlogd's metrics after each run and prints, under its row, the
# commits it made (per second of the run) and their mean batch: the commit rate is what
# moves the CPU per append on a fast disk (history.md, 2026-11-29 afternoon).
#
# AB_WRITERS sets the loadgen's writers (default 256, the count every recorded round
# used). PIN=1 puts tlogd on core 1 and the loadgen on core 0 (benches/lib.sh).
#
# AB_LOG_DIR runs every variant on one existing log instead of a fresh one: the
# directory `benches/at-scale.sh GOAL MINUTES DIR` kept (DIR/log, DIR/key, DIR/vkey),
# reopened by each run and left in place; each run adds to it.
#
# Needs the release binaries (cargo build --release --workspace --all-targets).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
bench_args "$@"
variants=("${items[@]}")
[ ${#variants[@]} -ge 1 ] || { echo "no variants" >&2; exit 2; }
bin="$CARGO_TARGET_DIR/release"
bench_work tlogd-ab
read -r -a serve_flags <<< "${TLOGD_FLAGS:-}"

keydir=$work
if [ -n "${AB_LOG_DIR:-}" ]; then
  keydir=$AB_LOG_DIR
  [ -d "$keydir/log" ] && [ -f "$keydir/key" ] || { echo "AB_LOG_DIR=$keydir has no log/ and key (see benches/at-scale.sh)" >&2; exit 2; }
else
  "$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null
fi

run() { # variant, loadgen flags...
  local spec=$1; shift
  local label=${spec%%=*} rest="" tlogd="$bin/tlogd" loadgen="$bin/tlog-loadgen" env=()
  [[ $spec == *=* ]] && rest=${spec#*=}
  IFS=, read -r -a parts <<< "$rest"
  [ -n "${parts[0]:-}" ] && tlogd=${parts[0]}
  local flags=()
  for p in "${parts[@]:1}"; do
    if [[ $p == --* ]]; then flags+=("$p")
    elif [[ $p == loadgen=* ]]; then loadgen=${p#loadgen=}
    else env+=("$p"); fi
  done
  local port dir="$work/log-$RANDOM"
  [ -n "${AB_LOG_DIR:-}" ] && dir="$AB_LOG_DIR/log"
  port=$(free_port)
  local metrics="" mport=""
  if [ -n "${AB_COMMITS:-}" ]; then mport=$(free_port); metrics="127.0.0.1:$mport"; fi
  env "${env[@]}" "${on_server_core[@]}" "$tlogd" serve --storage-dir "$dir" --origin bench.example/log --private-key-file "$keydir/key" \
    --listen "127.0.0.1:$port" --metrics-listen "$metrics" "${serve_flags[@]}" "${flags[@]}" 2>"$work/tlogd.log" &
  local tl=$!
  pids+=("$tl")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  "${on_driver_core[@]}" "$loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$keydir/vkey")" \
    --writers "${AB_WRITERS:-256}" --duration "${secs}s" --log-pid "$tl" --probe-dir "$dir" --quiet \
    --report-json "$work/r.json" "$@" >/dev/null || true
  [ -z "$mport" ] || curl -sf "http://$metrics/metrics" > "$work/metrics" || : > "$work/metrics"
  kill "$tl"; wait "$tl" 2>/dev/null || true
  [ -n "${AB_LOG_DIR:-}" ] || rm -rf "$dir"
  bench_row "$work/r.json" "$label" "$work/rows" tree_growth_per_s tti
  [ -z "$mport" ] || awk -v secs="$secs" '
    /^tlogd_batch_size_count/ { n += $2 } /^tlogd_batch_size_sum/ { s += $2 }
    END { if (n) printf "|  ↳ %d commits (%.0f/s of the run), %.1f entries each | | | | | | |\n", n, n / secs, s / n }' "$work/metrics"
}

echo "$(pinning); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +'%F %H:%M UTC')"
echo "| variant | appends/s | tlogd CPU/append | loadgen CPU/add | add p50 / p99 | time to integrate p50 / p99 | |"
echo "|---|---|---|---|---|---|---|"
bench_rounds "$rounds" ${#variants[@]} "${variants[@]}" "${loadgen_args[@]}"
bench_means "$work/rows"
