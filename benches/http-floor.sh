#!/usr/bin/env bash
# The floor under tlogd's CPU per append, beside tlogd, under one loadgen (256 writers
# unless FLOOR_WRITERS says otherwise, HTTP/1.1 keep-alive unless the loadgen flags say
# otherwise), runs alternated:
#
#   null    the daemon's HTTP server answering POST /add at once (example http_floor)
#   memory  tlogd's router and engine over the in-memory store, commits blocking a
#           thread for FLOOR_COMMIT_US (default 1000) µs each (example http_floor)
#   deferred  the same server, each add answered when a thread completes its batch,
#           FLOOR_COMMIT_US after taking it (the engine's queue and wake-ups, no log)
#   posix   tlogd serve on POSIX, dedup on (TLOGD_FLAGS adds serve flags)
#   tessera Go Trillian Tessera v1.0.4's POSIX conformance server (built once with
#           `go install`, as benches/vs-tessera.sh)
#
# `null` bounds what any server on this HTTP stack can reach on this machine with this
# driver: its rate over Tessera's is the largest lead HTTP/1.1 allows here.
#
# Prints one markdown row per run and the mean of each: acknowledged adds/s, server
# CPU per add (utime+stime from /proc/PID/stat via the loadgen's --log-pid), the
# loadgen's CPU per add, add latency. `null` and `deferred` are driven with --no-verify
# (they are not logs); the others are verified entry by entry. Results go to benches/results/history.md.
#
#   benches/http-floor.sh SECONDS ROUNDS [MODE...] [-- extra loadgen flags]
#
# PIN=1 puts the server on core 1 and the loadgen on core 0 (benches/lib.sh).
#
# Needs the release binaries and the example:
#   cargo build --release --workspace --all-targets && cargo build --release -p tlogd --example http_floor
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
bench_args "$@"
modes=("${items[@]}")
[ ${#modes[@]} -ge 1 ] || modes=(null deferred memory posix)
bin="$CARGO_TARGET_DIR/release"
floor="$bin/examples/http_floor"
[ -x "$floor" ] || { echo "build the example first: cargo build --release -p tlogd --example http_floor" >&2; exit 2; }
if [[ " ${modes[*]} " == *" tessera "* ]]; then
  tessera_tool cmd/conformance/posix
fi
bench_work tlogd-floor
read -r -a serve_flags <<< "${TLOGD_FLAGS:-}"
"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

run() { # mode, loadgen flags...
  local mode=$1; shift
  local port dir="$work/log-$RANDOM" key=() srv
  port=$(free_port)
  case $mode in
    null|deferred|memory)
      "${on_server_core[@]}" "$floor" --listen "127.0.0.1:$port" --mode "$mode" --commit-delay-us "${FLOOR_COMMIT_US:-1000}" \
        >"$work/floor-$port.out" 2>"$work/server.log" &
      srv=$!
      ;;
    posix)
      "${on_server_core[@]}" "$bin/tlogd" serve --storage-dir "$dir" --origin bench.example/log --private-key-file "$work/key" \
        --listen "127.0.0.1:$port" --metrics-listen "" "${serve_flags[@]}" 2>"$work/server.log" &
      srv=$!
      ;;
    tessera)
      "${on_server_core[@]}" "$gobin/posix" -storage_dir "$dir" -private_key "$work/key" -listen "127.0.0.1:$port" 2>"$work/server.log" &
      srv=$!
      ;;
    *) echo "unknown mode $mode (null, deferred, memory, posix, tessera)" >&2; exit 2 ;;
  esac
  pids+=("$srv")
  # The example prints its key once it listens.
  [ "$mode" = posix ] || [ "$mode" = tessera ] || for _ in $(seq 600); do [ -s "$work/floor-$port.out" ] && break; sleep 0.1; done
  case $mode in
    null|deferred) key=(--no-verify) ;;
    memory) key=(--log-public-key "$(head -1 "$work/floor-$port.out")") ;;
    posix|tessera) key=(--log-public-key "$(cat "$work/vkey")") ;;
  esac
  # Up (Go Tessera publishes its first checkpoint within a second or so).
  for _ in $(seq 600); do
    if [ "${key[0]}" = --no-verify ]; then curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    else curl -sf -o /dev/null "http://127.0.0.1:$port/checkpoint" && break; fi
    sleep 0.1
  done
  "${on_driver_core[@]}" "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" "${key[@]}" \
    --writers "${FLOOR_WRITERS:-256}" --duration "${secs}s" --log-pid "$srv" --quiet \
    --report-json "$work/r.json" "$@" >/dev/null || true
  kill "$srv"; wait "$srv" 2>/dev/null || true
  rm -rf "$dir"
  bench_row "$work/r.json" "$mode" "$work/rows" write_rate_per_s verified
}

echo "$(pinning); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +'%F %H:%M UTC')"
echo "| server | adds/s | server CPU/add | loadgen CPU/add | add p50 / p99 | verified | |"
echo "|---|---|---|---|---|---|---|"
bench_rounds "$rounds" ${#modes[@]} "${modes[@]}" "${loadgen_args[@]}"
bench_means "$work/rows"
