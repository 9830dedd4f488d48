#!/usr/bin/env bash
# `tlogd migrate`, the paths users take (issue #38): a log of N entries (default
# 1,000,000) written by Go Tessera v1.0.4's POSIX conformance server (driven by
# tlog-loadgen), copied
#   1. from its directory into MinIO (S3),
#   2. from its directory into PostgreSQL,
#   3. into a tlogd POSIX directory, appended to by tlogd, and that tlogd POSIX log
#      copied from its directory into MinIO (the move when one machine is no longer
#      enough).
# Each copy is killed (SIGKILL) twice at random moments, checked to hold no checkpoint
# after each kill, and resumed; then served by `tlogd serve`, checked whole by Go
# Tessera's fsck and `tlogd verify`, and appended to (the next entry must get index N).
# Prints one markdown row per copy. Results go to benches/README.md ("Migrating") and
# benches/results/history.md by hand.
#
#   benches/migrate.sh [ENTRIES, default 1000000] [JOBS, default 16]
#
# Needs the release binaries (cargo build --release --workspace --all-targets), MinIO
# (scripts/setup.sh puts it in ~/.cache/tlogd-tools/bin), PostgreSQL and Go (Tessera's
# tools are built once with `go install` into $TESSERA_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
entries=${1:-1000000}
jobs=${2:-16}
bin="$CARGO_TARGET_DIR/release"
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
tessera_tool cmd/conformance/posix
tessera_tool cmd/fsck
bench_work tlogd-migrate "${MIGRATE_KEEP:-}"
chmod 755 "$work"
origin=bench.example/migrated
"$bin/tlogd" keygen --origin "$origin" --out "$work/key" > "$work/vkey" 2>/dev/null

# The source: Go Tessera's POSIX server, filled by the loadgen, then stopped.
src="$work/tessera"
port=$(free_port)
"$gobin/posix" -storage_dir "$src" -private_key "$work/key" -listen "127.0.0.1:$port" 2>"$work/tessera.log" &
tess=$!; pids+=("$tess")
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
t0=$(date +%s.%N)
"$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
  --writers 256 --leaf-write-goal "$entries" --max-runtime 30m --quiet >/dev/null || true
for _ in $(seq 100); do
  size=$(sed -n 2p "$src/checkpoint")
  [ "$size" -ge "$entries" ] && break
  sleep 0.5
done
kill "$tess"; wait "$tess" 2>/dev/null || true
size=$(sed -n 2p "$src/checkpoint")
echo "source: Go Tessera POSIX log of $size entries, written in $(python3 -c "print(f'{$(date +%s.%N) - $t0:.0f}')") s" >&2

start_minio
start_postgres

# The target's flags (as `serve` takes them) for kind $1 and name $2.
target() {
  case $1 in
    s3) echo --backend s3 --bucket "$2" --region us-east-1 --endpoint "http://127.0.0.1:$s3port" --allow-http \
          --dedup-path "$work/$2-dedup" ;;
    postgres) echo --backend postgres --database-url "postgres://postgres@127.0.0.1:$pgport/$2" \
          --dedup-path "$work/$2-dedup" ;;
    posix) echo --storage-dir "$work/$2" ;;
  esac
}
# The target's checkpoint, if it holds one (after a kill it may only if the copy was
# complete: then it is the source's).
target_checkpoint() {
  case $1 in
    s3) curl -sf "${sign[@]}" "http://127.0.0.1:$s3port/$2/checkpoint" || true ;;
    postgres) psql -h 127.0.0.1 -p "$pgport" -U postgres -d "$2" -tAc \
        "select convert_from(data, 'UTF8') from tlogd_checkpoint" 2>/dev/null || true ;;
    posix) cat "$work/$2/checkpoint" 2>/dev/null || true ;;
  esac
}
prepare() {
  case $1 in
    s3) curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/$2" >/dev/null ;;
    postgres) psql -h 127.0.0.1 -p "$pgport" -U postgres -qc "create database $2" ;;
    posix) ;;
  esac
}

# Copy $2 (a directory) into a fresh target of kind $1 named $3, killed twice, resumed;
# then serve, fsck, verify, append. Prints a row labelled $4.
migrate() {
  local kind=$1 from=$2 name=$3 label=$4 want kills=() t0 t1 out lport
  want=$(sed -n 2p "$from/checkpoint")
  prepare "$kind" "$name"
  # shellcheck disable=SC2046
  local args=(migrate --from "$from" --origin "$origin" --private-key-file "$work/key" --jobs "$jobs" --quiet $(target "$kind" "$name"))
  local total0; total0=$(date +%s.%N)
  # Kills at random moments early enough to land inside the copy (1M entries copy in
  # ~8 s here): between 0.3 s and 1.5 s into each run.
  local span; span=$(python3 -c "print(max(0.5, min(1.5, 0.15 * $want / 100000)))")
  for _ in 1 2; do
    "$bin/tlogd" "${args[@]}" >"$work/$name.out" 2>"$work/$name.err" &
    local m=$! cp
    if [ "$kind" = postgres ]; then
      # PostgreSQL takes a million entries in about a second: kill once a random share
      # of them is committed (its tree row, polled).
      local at; at=$(python3 -c "import random; print(int($want * random.uniform(0.1, 0.8)))")
      local sz
      while kill -0 "$m" 2>/dev/null; do
        sz=$(psql -h 127.0.0.1 -p "$pgport" -U postgres -d "$name" -tAc 'select size from tlogd_tree' 2>/dev/null || true)
        [ "${sz:-0}" -ge "$at" ] && break
        sleep 0.01
      done
    else
      sleep "$(python3 -c "import random; print(random.uniform(0.3, $span))")"
    fi
    if kill -9 "$m" 2>/dev/null; then
      wait "$m" 2>/dev/null || true
      cp=$(target_checkpoint "$kind" "$name")
      if [ -z "$cp" ]; then kills+=("killed, no checkpoint")
      elif [ "$cp" = "$(cat "$from/checkpoint")" ]; then kills+=("killed after the copy")
      else echo "FAILED: a checkpoint other than the source's in $name after a kill" >&2; exit 1; fi
    else
      wait "$m" 2>/dev/null || true
      kills+=("finished before the kill")
    fi
  done
  t0=$(date +%s.%N)
  "$bin/tlogd" "${args[@]}" >"$work/$name.out" 2>"$work/$name.err" ||
    { echo "FAILED: the last run into $name: $(tail -3 "$work/$name.err")" >&2; exit 1; }
  t1=$(date +%s.%N)
  out=$(head -1 "$work/$name.out")
  lport=$(free_port)
  # shellcheck disable=SC2046
  "$bin/tlogd" serve --origin "$origin" --private-key-file "$work/key" --listen "127.0.0.1:$lport" \
    --metrics-listen "" $(target "$kind" "$name") 2>"$work/$name-serve.log" &
  local tl=$!; pids+=("$tl")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$lport/checkpoint" >/dev/null && break; sleep 0.1; done
  local fsck verify first
  local status=0
  "$gobin/fsck" --storage_url "http://127.0.0.1:$lport/" --public_key "$work/vkey" --ui=false -N 8 \
    >"$work/$name.fsck" 2>&1 || status=$?
  fsck=$(fsck_verdict "$work/$name.fsck" "$status")
  if "$bin/tlogd" verify "http://127.0.0.1:$lport" --log-public-key "$(cat "$work/vkey")" --quiet >"$work/$name.verify" 2>&1
  then verify=ok; else verify="FAILED ($(tail -1 "$work/$name.verify" | cut -c1-100))"; fi
  first=""
  for _ in $(seq 600); do
    first=$(curl -s -w '%{http_code}' -o "$work/$name.add" --data-binary "first entry after the copy into $name" "http://127.0.0.1:$lport/add")
    [ "$first" = 200 ] && { first=$(cat "$work/$name.add"); break; }
    sleep 0.1
  done
  kill "$tl"; wait "$tl" 2>/dev/null || true
  python3 - "$label" "$want" "$out" "$total0" "$t0" "$t1" "$fsck" "$verify" "$first" "$(IFS=';'; echo "${kills[*]}")" <<'PY'
import re, sys
label, want, out, total0, t0, t1, fsck, verify, first, kills = sys.argv[1:11]
want = int(want)
m = re.search(r"copied (\d+) entries .* ([\d.]+) s: (\d+) entries/s(, resumed at (\d+))?", out)
copied, secs, rate = (int(m[1]), float(m[2]), int(m[3])) if m else (0, 0.0, 0)
resumed = int(m[5]) if m and m[5] else 0
kills = kills.replace(";", "; ")
last = f"resumed at {resumed:,}, copied {copied:,} in {secs:.1f} s: {rate:,} entries/s" if m else out
overall = want / (float(t1) - float(total0))
ok_first = "ok" if first.strip() == str(want) else f"FAILED (got {first.strip()!r})"
print(f"| {label} | {want:,} | {kills} | {last} | {overall:,.0f} entries/s | {fsck} | {verify} | {ok_first} |")
PY
}

echo "| copy | entries | kills | last run | overall, kills and restarts included | Go fsck | tlogd verify | next add gets index N |"
echo "|---|---|---|---|---|---|---|---|"
migrate s3 "$src" tesserains3 "Go Tessera POSIX → S3 (MinIO)"
migrate postgres "$src" tesserainpg "Go Tessera POSIX → PostgreSQL"
# Tessera → tlogd POSIX (uninterrupted), appended to by tlogd, then tlogd POSIX → S3.
"$bin/tlogd" migrate --from "$src" --origin "$origin" --private-key-file "$work/key" --quiet \
  --storage-dir "$work/tlogdposix" >/dev/null 2>&1
lport=$(free_port)
"$bin/tlogd" serve --storage-dir "$work/tlogdposix" --origin "$origin" --private-key-file "$work/key" \
  --listen "127.0.0.1:$lport" --metrics-listen "" 2>"$work/tlogdposix-serve.log" &
tl=$!; pids+=("$tl")
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$lport/checkpoint" >/dev/null && break; sleep 0.1; done
"$bin/tlog-loadgen" --log-url "http://127.0.0.1:$lport" --log-public-key "$(cat "$work/vkey")" \
  --writers 64 --leaf-write-goal 10000 --max-runtime 5m --quiet >/dev/null || true
sleep 2
kill "$tl"; wait "$tl" 2>/dev/null || true
migrate s3 "$work/tlogdposix" tlogdins3 "tlogd POSIX (Tessera's, appended to) → S3 (MinIO)"
