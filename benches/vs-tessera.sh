#!/usr/bin/env bash
# tlogd beside Go Trillian Tessera v1.0.4, one driver for both (tlog-loadgen, HTTP/1.1
# keep-alive, every entry verified), on this machine, runs alternated so that drift hits
# both alike, fresh log (and database) per run. Prints one markdown row per run:
# appends/s (checkpoint growth), the log server's CPU per append (utime+stime from
# /proc/PID/stat, sampled by the loadgen's --log-pid), the database server's CPU per
# append (MySQL rows), the loadgen's own CPU per add, add latency, time to integrate.
# Results go to benches/results/history.md by hand.
#
#   benches/vs-tessera.sh posix|mysql [seconds per run, default 20] [pairs, default 3] [extra loadgen flags...]
#
# posix: Tessera's POSIX conformance server (its in-memory antispam, as it ships; with
#        GO_ANTISPAM=1 also its persistent Badger antispam) against `tlogd serve
#        --storage-dir` with its persistent dedup index on.
# mysql: Tessera's MySQL conformance server (publish interval 1 s, as tlogd's) against
#        `tlogd serve --backend mysql` with dedup on, on one private MariaDB
#        (durable commits, as benches/sql-backends.sh).
#
# Needs the release binaries (cargo build --release --workspace --all-targets) and Go;
# the Tessera servers are built once with `go install` into $TESSERA_BIN (default
# ~/.cache/tlogd-tools/tessera). TLOGD_BIN overrides the tlogd binary (old vs new).
# VS_WRITERS sets the loadgen's writers for both servers (default 256). Extra loadgen
# flags go to both: Go's conformance servers speak h2c too (`--h2c --h2c-connections 4`).
# PIN=1 puts each server on core 1 and the loadgen and MariaDB on core 0 (benches/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
mode="${1:?posix or mysql}"
secs="${2:-20}"
pairs="${3:-3}"
shift $(($# > 3 ? 3 : $#))
bin="$CARGO_TARGET_DIR/release"
tlogd="${TLOGD_BIN:-$bin/tlogd}"
source benches/lib.sh
tessera_tool "cmd/conformance/$mode"
bench_work tlogd-vs-tessera

"$tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

if [ "$mode" = mysql ]; then
  schema=$(go env GOMODCACHE)/github.com/transparency-dev/tessera@$tessera_version/storage/mysql/schema.sql
  [ -f "$schema" ] || { echo "no $schema (go install should have fetched it)" >&2; exit 1; }
  start_mariadb "$work/my"
fi

# CPU ticks of this script's own MariaDB (0 without one): by PID, since a MariaDB of an
# earlier run of this script may still be exiting.
db_ticks() { if [ -n "${mypid:-}" ]; then ticks_pid "$mypid"; else echo 0; fi; }

run() { # which (go|go-antispam|tlogd), loadgen flags...
  local which=$1; shift
  local port dir="$work/log-$RANDOM" db="b$RANDOM" label s0 s1
  port=$(free_port)
  case "$mode/$which" in
    posix/go) label="Go Tessera POSIX"
      "${on_server_core[@]}" "$gobin/posix" -storage_dir "$dir" -private_key "$work/key" -listen "127.0.0.1:$port" 2>"$work/server.log" & ;;
    posix/go-antispam) label="Go Tessera POSIX, -antispam"
      "${on_server_core[@]}" "$gobin/posix" -storage_dir "$dir" -private_key "$work/key" -listen "127.0.0.1:$port" -antispam 2>"$work/server.log" & ;;
    posix/tlogd) label="tlogd POSIX, dedup"
      "${on_server_core[@]}" "$tlogd" serve --storage-dir "$dir" --origin bench.example/log --private-key-file "$work/key" \
        --listen "127.0.0.1:$port" --metrics-listen "" 2>"$work/server.log" & ;;
    mysql/go) label="Go Tessera MySQL"
      mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database $db"
      "${on_server_core[@]}" "$gobin/mysql" -mysql_uri "root@tcp(127.0.0.1:$myport)/$db" -init_schema_path "$schema" \
        -private_key_path "$work/key" -listen "127.0.0.1:$port" -publish_interval 1s 2>"$work/server.log" & ;;
    mysql/tlogd) label="tlogd MySQL, dedup"
      mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database $db"
      "${on_server_core[@]}" "$tlogd" serve --backend mysql --database-url "mysql://root@127.0.0.1:$myport/$db" --dedup-path "$dir/dedup" \
        --origin bench.example/log --private-key-file "$work/key" --listen "127.0.0.1:$port" --metrics-listen "" \
        2>"$work/server.log" & ;;
  esac
  local server=$!
  pids+=("$server")
  # Go Tessera publishes its first checkpoint within a second or so.
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  s0=$(db_ticks)
  "${on_driver_core[@]}" "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
    --writers "${VS_WRITERS:-256}" --duration "${secs}s" --log-pid "$server" --quiet \
    --report-json "$work/r.json" "$@" >/dev/null || true
  s1=$(db_ticks)
  kill "$server"; wait "$server" 2>/dev/null || true
  rm -rf "$dir"
  python3 - "$work/r.json" "$label" $((s1 - s0)) "$(getconf CLK_TCK)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); label = sys.argv[2]
db, hz = int(sys.argv[3]), int(sys.argv[4])
adds = max(1, r["writes_new"] + r["writes_duplicate"])
ops = {o["operation"]: o for o in r["operations"]}
add, tti = ops.get("add (time in queue)", {}), ops.get("time to integrate", {})
f = lambda o, k: o.get(k, float("nan"))
dbcpu = f"{db / hz / adds * 1e6:.1f} µs" if db else "–"
verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:300]
rss = r.get("log_peak_rss_mib")
rss = f"{rss:.0f} MiB" if rss else "–"
print(f"| {label} | {r['tree_growth_per_s']:,.0f} | {r['log_cpu_us_per_add']:.1f} µs | {dbcpu} | {r['loadgen_cpu_us_per_add']:.1f} µs | "
      f"{f(add,'p50_ms'):.1f} / {f(add,'p99_ms'):.1f} ms | {f(tti,'p50_ms'):.0f} / {f(tti,'p99_ms'):.0f} ms | {rss} | {verdict} |")
EOF
}

variants=(go tlogd)
[ "$mode" = posix ] && [ "${GO_ANTISPAM:-0}" = 1 ] && variants=(go go-antispam tlogd)
# VS_VARIANTS="tlogd" (any of go, go-antispam, tlogd) runs only those.
[ -n "${VS_VARIANTS:-}" ] && read -ra variants <<<"$VS_VARIANTS"
echo "$(pinning); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +'%F %H:%M UTC')"
echo "| server | appends/s | server CPU/append | database CPU/append | loadgen CPU/add | add p50 / p99 | time to integrate p50 / p99 | server peak RSS | |"
echo "|---|---|---|---|---|---|---|---|---|"
for i in $(seq "$pairs"); do
  # Alternate the order, so no variant always runs first (or on the warmer machine).
  if [ $((i % 2)) -eq 1 ]; then order=("${variants[@]}"); else order=(); for ((j=${#variants[@]}-1; j>=0; j--)); do order+=("${variants[j]}"); done; fi
  for v in "${order[@]}"; do run "$v" "$@"; done
done
