#!/usr/bin/env bash
# What tlogd's commits cost MariaDB: tlogd on a private MariaDB (durable commits, as
# benches/vs-tessera.sh mysql) under the loadgen (HTTP/1.1, every entry verified), with
# MariaDB's own counters (SHOW GLOBAL STATUS) and its CPU taken over 10 s in the middle
# of each run. Variants that change the commit rate (e.g. `[batching] max_age_ms`) then
# separate MariaDB's CPU per commit from its CPU per append. One markdown row per run,
# variants rotated each round; results go to benches/results/history.md by hand.
#
#   benches/mysql-commits.sh SECONDS ROUNDS VARIANT...
#   benches/mysql-commits.sh 25 2 base linger5=--config=/tmp/linger5.toml
#
# A variant is LABEL or LABEL=FLAG[,FLAG...]: extra `tlogd serve` flags. MC_WRITERS sets
# the loadgen's writers (default 1024). Needs the release binaries and MariaDB.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
bench_args "$@"
(( secs >= 20 )) || { echo "runs of 20 s at least: the counters are read from 8 s to 18 s" >&2; exit 2; }
bin="$CARGO_TARGET_DIR/release"
tlogd="${TLOGD_BIN:-$bin/tlogd}"
bench_work tlogd-mysql-commits
"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null
start_mariadb "$work/my"

status() {
  mariadb -h 127.0.0.1 -P "$myport" -u root -N -e "SHOW GLOBAL STATUS WHERE Variable_name IN
    ('Com_commit', 'Questions', 'Bytes_received', 'Innodb_os_log_written')" | sort
}

run() { # variant
  local label=${1%%=*} flags=() port db="b$RANDOM" tl lg s0 s1 t0 t1
  [[ "$1" == *=* ]] && IFS=, read -r -a flags <<< "${1#*=}"
  port=$(free_port)
  mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database $db"
  "$tlogd" serve --backend mysql --database-url "mysql://root@127.0.0.1:$myport/$db" --dedup-path "$work/dedup-$db" \
    --origin bench.example/log --private-key-file "$work/key" --listen "127.0.0.1:$port" --metrics-listen "" \
    "${flags[@]}" 2>"$work/tlogd.log" &
  tl=$!
  pids+=("$tl")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
    --writers "${MC_WRITERS:-1024}" --duration "${secs}s" --log-pid "$tl" --quiet --report-json "$work/r.json" \
    "${loadgen_args[@]}" >/dev/null &
  lg=$!
  pids+=("$lg")
  size() { curl -sf "http://127.0.0.1:$port/checkpoint" | sed -n 2p; }
  sleep 8
  s0=$(size); status > "$work/st0"; t0=$(ticks_pid "$mypid")
  sleep 10
  s1=$(size); status > "$work/st1"; t1=$(ticks_pid "$mypid")
  wait "$lg" || true
  kill "$tl"; wait "$tl" 2>/dev/null || true
  rm -rf "$work/dedup-$db"
  mariadb -h 127.0.0.1 -P "$myport" -u root -e "drop database $db"
  python3 - "$label" $((s1 - s0)) $((t1 - t0)) "$(getconf CLK_TCK)" "$work/st0" "$work/st1" "$work/r.json" <<'EOF'
import json, sys
label, n, ticks, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
read = lambda p: {k: int(v) for k, v in (l.split() for l in open(p))}
a, b = read(sys.argv[5]), read(sys.argv[6])
d = {k: b[k] - a[k] for k in a}
r = json.load(open(sys.argv[7]))
n = max(n, 1)
commits = max(d["Com_commit"], 1)
verdict = "ok" if r["ok"] else "FAILED"
print(f"| {label} | {n / 10:,.0f} | {d['Com_commit'] / 10:,.0f} | {n / commits:,.0f} | "
      f"{ticks / hz * 1e6 / n:.2f} µs | {d['Bytes_received'] / n:.0f} B | {d['Innodb_os_log_written'] / n:.0f} B | "
      f"{r['log_cpu_us_per_add']:.1f} µs | {r['loadgen_cpu_us_per_add']:.1f} µs | {verdict} |")
EOF
}

echo "| variant | appends/s | commits/s | entries per commit | MariaDB CPU/append | MariaDB received/append | redo log/append | tlogd CPU/append (run) | loadgen CPU/add (run) | |"
echo "|---|---|---|---|---|---|---|---|---|---|"
bench_rounds "$rounds" "${#items[@]}" "${items[@]}"
