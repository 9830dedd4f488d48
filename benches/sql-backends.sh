#!/usr/bin/env bash
# Side-by-side run of tlogd on PostgreSQL and on MariaDB, on this machine, with the
# loadgen (every entry verified): private servers with durable commits, one then two
# frontends per database, CPU per append of tlogd and of the database server from
# /proc; two frontends also with the second forwarding its batches to the first
# (`[forward]`). Results go to benches/results/history.md by hand.
#
#   benches/sql-backends.sh [seconds per run, default 20]
#
# Needs the release binaries (cargo build --release -p tlogd -p tlog-loadgen) and the
# packages of `scripts/deps.sh test`. Runs as root (PostgreSQL as the postgres user).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
secs="${1:-20}"
bin="$CARGO_TARGET_DIR/release"
source benches/lib.sh
bench_work tlogd-sqlbench
chmod 755 "$work"

"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

start_postgres
start_mariadb "$work/my"

echo "frontends-secret" > "$work/forward.token"

run() { # backend url-base frontends label [forward: the others forward to the first]
  local backend=$1 base=$2 n=$3 label=$4 forward=${5:-} db="b$RANDOM"
  if [ "$backend" = postgres ]; then psql -q -h 127.0.0.1 -p "$pgport" -U postgres -c "create database $db"; server=postgres
  else mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database $db"; server=mariadbd; fi
  local urls=() tl=() first=""
  for i in $(seq "$n"); do
    local port; port=$(free_port)
    : > "$work/forward-$i.toml"
    if [ -n "$forward" ]; then
      printf '[forward]\ntoken_file = "%s"\n' "$work/forward.token" > "$work/forward-$i.toml"
      [ -n "$first" ] && printf 'to = "%s"\n' "$first" >> "$work/forward-$i.toml"
    fi
    [ -z "$first" ] && first="http://127.0.0.1:$port"
    "$bin/tlogd" serve --config "$work/forward-$i.toml" --backend "$backend" --database-url "$base/$db" --origin bench.example/log \
      --private-key-file "$work/key" --listen "127.0.0.1:$port" --metrics-listen "" --no-dedup 2>"$work/tlogd-$i.log" &
    tl+=($!); pids+=($!)
    urls+=(--write-log-url "http://127.0.0.1:$port")
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  done
  local t0=0 s0; for p in "${tl[@]}"; do t0=$((t0 + $(ticks_pid "$p"))); done; s0=$(ticks_of "$server")
  "$bin/tlog-loadgen" --log-url "${urls[1]}" "${urls[@]}" --log-public-key "$(cat "$work/vkey")" \
    --writers 256 --duration "$secs" --quiet --report-json "$work/r.json" >/dev/null
  local t1=0 s1; for p in "${tl[@]}"; do t1=$((t1 + $(ticks_pid "$p"))); done; s1=$(ticks_of "$server")
  for p in "${tl[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  python3 - "$work/r.json" "$label" $((t1 - t0)) $((s1 - s0)) "$(getconf CLK_TCK)" <<'EOF'
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
EOF
}

echo "| setup | appends/s (tree growth) | tlogd CPU/append | server CPU/append | add p50 / p99 / max | time-to-integrate p50 / p99 | |"
echo "|---|---|---|---|---|---|---|"
run postgres "postgres://postgres@127.0.0.1:$pgport" 1 "PostgreSQL 15, 1 frontend"
run mysql "mysql://root@127.0.0.1:$myport" 1 "MariaDB 10.11, 1 frontend"
run postgres "postgres://postgres@127.0.0.1:$pgport" 2 "PostgreSQL 15, 2 frontends"
run mysql "mysql://root@127.0.0.1:$myport" 2 "MariaDB 10.11, 2 frontends"
run postgres "postgres://postgres@127.0.0.1:$pgport" 2 "PostgreSQL 15, 2 frontends, forwarding" forward
run mysql "mysql://root@127.0.0.1:$myport" 2 "MariaDB 10.11, 2 frontends, forwarding" forward
run postgres "postgres://postgres@127.0.0.1:$pgport" 1 "PostgreSQL 15, 1 frontend (again)"
run mysql "mysql://root@127.0.0.1:$myport" 1 "MariaDB 10.11, 1 frontend (again)"
