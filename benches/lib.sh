# Shared by the bench scripts (sourced, not run).

# The run's work directory and the processes to stop when the script exits, however it
# exits: sets `work` (a fresh directory /tmp/$1-XXXX, removed at exit; or $2 if given,
# created if need be and kept) and `pids` (append each process started).
# The scripts' arguments: SECONDS ROUNDS ITEM... [-- extra loadgen flags]. Sets secs,
# rounds, items (the variants or modes) and loadgen_args.
bench_args() {
  secs="${1:?seconds per run}"
  rounds="${2:?rounds}"
  shift 2
  items=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do items+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  loadgen_args=("$@")
}

bench_work() {
  pids=()
  bench_keep=${2:-}
  if [ -n "$bench_keep" ]; then work=$bench_keep; mkdir -p "$work"; else work=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXX"); fi
  trap bench_cleanup EXIT
}
bench_cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "$bench_keep" ] || rm -rf "$work"
  return 0
}

# Go Tessera's tools at the version every comparison uses, built once with `go install`
# into $TESSERA_BIN (default ~/.cache/tlogd-tools/tessera): `tessera_tool cmd/fsck` or
# `tessera_tool cmd/conformance/posix` installs it if missing and sets `gobin`.
tessera_version=v1.0.4
tessera_tool() {
  gobin="${TESSERA_BIN:-$HOME/.cache/tlogd-tools/tessera}"
  [ -x "$gobin/$(basename "$1")" ] && return
  mkdir -p "$gobin"
  GOBIN="$gobin" go install "github.com/transparency-dev/tessera/$1@$tessera_version" >&2
}

# The verdict of Go Tessera's (or TesseraCT's) fsck from its output file $1 and exit status
# $2: "ok" or "FAILED (its last line)". Both fsck tools exit 0 when they fail under
# `--ui=false` (checked with Tessera v1.0.4: a flipped byte in a bundle prints "fsck
# failed" and exits 0), so only their "Successfully fsck'd" line counts as a pass.
fsck_verdict() {
  if [ "$2" -eq 0 ] && grep -q "Successfully fsck'd" "$1"; then echo ok
  else echo "FAILED (exit $2: $(tail -1 "$1" | cut -c1-100))"; fi
}

# PIN=1 pins the log server to core 1 and its driver (the loadgen) and database or object
# store to core 0 (`taskset`), so that neither takes the other's CPU and the server's
# figures depend less on the driver and the hour (issue #59's method). Both Go and tokio
# size their thread pools from the affinity they start with: a pinned server runs one
# worker. Unset, the scheduler shares both cores among all of them, as before. Prefix a
# command with "${on_server_core[@]}" or "${on_driver_core[@]}".
on_server_core=() on_driver_core=()
if [ "${PIN:-0}" = 1 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "PIN=1 needs two cores" >&2; exit 2; }
  on_server_core=(taskset -c 1) on_driver_core=(taskset -c 0)
fi
pinning() { if [ "${PIN:-0}" = 1 ]; then echo "pinned: server on core 1, driver and database on core 0"; else echo "unpinned"; fi; }

# A free TCP port on 127.0.0.1 (this machine already has a listener on 2024).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A private MinIO (one drive in $work/minio, its defaults: fsync'd writes) on a free port,
# with the credentials the scripts export: sets `s3port` and `minio`, adds it to `pids`,
# sets `sign` (curl's SigV4 flags), returns once it answers. Needs `tools` and `work`.
start_minio() {
  export AWS_ACCESS_KEY_ID=tlogd-bench AWS_SECRET_ACCESS_KEY=tlogd-bench-secret AWS_EC2_METADATA_DISABLED=true
  s3port=$(free_port)
  MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off \
    "${on_driver_core[@]}" "$tools/minio" server "$work/minio" --address "127.0.0.1:$s3port" \
    --console-address "127.0.0.1:$(free_port)" --certs-dir "$work/certs" --quiet >"$work/minio.log" 2>&1 &
  minio=$!; pids+=($minio)
  sign=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY")
  for _ in $(seq 100); do curl -sf "${sign[@]}" "http://127.0.0.1:$s3port/" >/dev/null && break; sleep 0.2; done
}

# utime+stime (clock ticks) of process $1.
ticks_pid() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# utime+stime (clock ticks) of process $1's live threads whose name starts with $2
# (RocksDB's compaction and flush threads are `rocksdb:low` and `rocksdb:high`).
ticks_threads() { awk -v p="($2" 'index($2, p) == 1 { s += $14 + $15 } END { print s + 0 }' /proc/"$1"/task/[0-9]*/stat 2>/dev/null; }

# utime+stime (clock ticks) of every process whose command name is $1.
ticks_of() { awk -v n="($1)" '$2 == n { s += $14 + $15 } END { print s + 0 }' /proc/[0-9]*/stat 2>/dev/null; }

# A private MariaDB with durable commits (the MySQL rows of benches/README.md) in
# directory $1 on a free port: sets `myport` and `mypid`, adds the server to `pids`,
# returns once it answers.
start_mariadb() {
  local dir=$1
  myport=$(free_port)
  mariadb-install-db --no-defaults --user=root --datadir="$dir" --auth-root-authentication-method=normal --skip-test-db >/dev/null 2>&1
  "${on_driver_core[@]}" mariadbd --no-defaults --user=root --datadir="$dir" --port="$myport" --bind-address=127.0.0.1 --socket="$dir/s.sock" \
    --skip-log-bin --innodb-buffer-pool-size=1G --innodb-log-file-size=512M --innodb-flush-log-at-trx-commit=1 \
    --max-connections=500 --max-allowed-packet=64M >"$dir.log" 2>&1 &
  mypid=$!
  pids+=("$mypid")
  for _ in $(seq 100); do mariadb -h 127.0.0.1 -P "$myport" -u root -e 'select 1' >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "MariaDB did not start (see $dir.log)" >&2
  return 1
}

# A private PostgreSQL (initdb + postgres as the postgres user; fsync and
# synchronous_commit on, the defaults) in $work/pg on a free port: sets `pgport`, adds
# the server to `pids`, returns once it answers. `$work` must be readable by postgres.
start_postgres() {
  local pgbin; pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  pgport=$(free_port)
  install -d -o postgres -m 700 "$work/pg"
  su postgres -c "$pgbin/initdb -D $work/pg -U postgres --auth=trust --no-instructions --no-sync" >/dev/null
  su postgres -c "$pgbin/postgres -D $work/pg -p $pgport -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c shared_buffers=1GB -c max_connections=300" >"$work/pg.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do psql -h 127.0.0.1 -p "$pgport" -U postgres -c 'select 1' >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "PostgreSQL did not start (see $work/pg.log)" >&2
  return 1
}

# Run `run ITEM ARGS...` for every item, ROUNDS times, rotating the order each round so
# no item always runs first (or on the warmer machine):
#   bench_rounds ROUNDS N ITEM_1 .. ITEM_N [ARGS...]
bench_rounds() {
  local rounds=$1 n=$2 i j
  shift 2
  local items=("${@:1:n}")
  shift "$n"
  for i in $(seq "$rounds"); do
    for j in $(seq 0 $((n - 1))); do run "${items[$(((i - 1 + j) % n))]}" "$@"; done
  done
}

# One run's markdown row from the loadgen's JSON report $1, labelled $2, and its JSON row
# appended to $3 for bench_means. $4 is the report's rate field (`tree_growth_per_s`
# for a log, `write_rate_per_s` for a server that is not one); $5 the last column: `tti`
# (time to integrate p50 / p99) or `verified` (entries verified).
bench_row() {
  python3 - "$@" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); label, rows, rate, tail = sys.argv[2:6]
ops = {o["operation"]: o for o in r["operations"]}
add, tti = ops["add (time in queue)"], ops["time to integrate"]
verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:300]
open(rows, "a").write(json.dumps([label, r[rate], r["log_cpu_us_per_add"], r["loadgen_cpu_us_per_add"]]) + "\n")
last = f"{tti['p50_ms']:.0f} / {tti['p99_ms']:.0f} ms" if tail == "tti" else f"{r['verified_entries']:,}"
print(f"| {label} | {r[rate]:,.0f} | {r['log_cpu_us_per_add']:.1f} µs | {r['loadgen_cpu_us_per_add']:.1f} µs | "
      f"{add['p50_ms']:.2f} / {add['p99_ms']:.2f} ms | {last} | {verdict} |", flush=True)
EOF
}

# The mean of each label's runs, as bold markdown rows: file $1 holds one JSON row per
# run, [label, rate/s, server CPU µs, loadgen CPU µs], as ab.sh and http-floor.sh write.
bench_means() {
  python3 - "$1" <<'EOF'
import json, sys, collections
by = collections.OrderedDict()
for line in open(sys.argv[1]):
    label, rate, cpu, lg = json.loads(line)
    by.setdefault(label, []).append((rate, cpu, lg))
for label, rows in by.items():
    n = len(rows)
    print(f"| **mean {label}** ({n}) | **{sum(r[0] for r in rows) / n:,.0f}** | **{sum(r[1] for r in rows) / n:.1f} µs** | "
          f"{sum(r[2] for r in rows) / n:.1f} µs | | | |")
EOF
}
