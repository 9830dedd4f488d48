#!/usr/bin/env bash
# `tlogd migrate` of a Certificate Transparency log (#60): a TesseraCT v0.1.1 POSIX log
# of N leaves (default 20,000) written under its CT hammer (64 writers, 10 %
# duplicates), signed with a key tlogd is then given (a continuation), copied
#   1. from its directory into a tlogd CT log on POSIX,
#   2. over HTTP (a static file server on its directory) into MinIO (S3),
# each killed (SIGKILL) once at a random moment, checked to hold no checkpoint after the
# kill, and resumed; then served by `tlogd serve`, checked whole by `tlogd verify --ct`
# and TesseraCT's fsck (judged by its "Successfully fsck'd" line: it exits 0 when it
# fails), and continued: the hammer adds 500 leaves more through tlogd.
# Prints one markdown row per copy. Results go to benches/README.md ("Migrating") and
# benches/results/history.md by hand.
#
#   benches/ct-migrate.sh [LEAVES, default 20000] [JOBS, default 16]
#
# Needs the release binaries, MinIO, TesseraCT's POSIX server and CT hammer
# (scripts/deps.sh puts them in ~/.cache/tlogd-tools/bin), Go (TesseraCT's fsck is
# built once with `go install`), openssl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
leaves=${1:-20000}
jobs=${2:-16}
bin="$CARGO_TARGET_DIR/release"
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
if [ ! -x "$tools/tesseract-fsck" ]; then
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-buildvcs=false go install github.com/transparency-dev/tesseract/cmd/fsck@v0.1.1
  mv "$tmp/fsck" "$tools/tesseract-fsck"; rm -rf "$tmp"
fi
bench_work tlogd-ct-migrate "${MIGRATE_KEEP:-}"
testdata=crates/ct/testdata/chains/tesseract/hammer
origin=bench.ct.example/migrated
# TesseraCT takes SEC 1 PEM keys; tlogd takes them too.
openssl ecparam -name prime256v1 -genkey -noout -out "$work/key.pem" 2>/dev/null
chmod 600 "$work/key.pem"
pubkey=$(openssl ec -in "$work/key.pem" -pubout -outform DER 2>/dev/null | base64 -w0)
cp "$testdata/test_root_ca_cert.pem" "$work/roots.pem"

hammer() { # read_url write_url goal
  "$tools/ct-hammer" --origin="$origin" --log_public_key="$pubkey" \
    --log_url="$1" --write_log_url="$2" \
    --intermediate_ca_cert_path="$testdata/test_intermediate_ca_cert.pem" \
    --intermediate_ca_key_path="$testdata/test_intermediate_ca_private_key.pem" \
    --cert_sign_private_key_path="$testdata/test_leaf_cert_signing_private_key.pem" \
    --num_writers=64 --max_write_ops=100000 --num_readers_random=0 \
    --num_readers_full=0 --max_read_ops=0 --num_mmd_verifiers=0 --dup_chance=0.1 \
    --leaf_write_goal="$3" --max_runtime=30m --show_ui=false --logtostderr \
    >"$work/hammer.out" 2>"$work/hammer.err"
}

# The source: TesseraCT's POSIX server under its hammer, then stopped.
src="$work/tesseract"
# TesseraCT v0.1.1 creates issuer/ on its first writes, and two writers racing to create
# it fail one add with 500 ("mkdir ...: file exists"): made here first.
mkdir -p "$src/issuer"
port=$(free_port)
"$tools/tesseract-posix" --http_endpoint="127.0.0.1:$port" --origin="$origin" \
  --private_key="$work/key.pem" --roots_pem_file="$work/roots.pem" --storage_dir="$src" \
  --enable_publication_awaiter=false --checkpoint_interval=1s 2>"$work/tesseract.log" &
tess=$!; pids+=("$tess")
for _ in $(seq 300); do [ -f "$src/checkpoint" ] && break; sleep 0.1; done
t0=$(date +%s)
hammer "file://$src/" "http://127.0.0.1:$port/" "$leaves" || { echo "the hammer failed: $(tail -3 "$work/hammer.err")" >&2; exit 1; }
sleep 2
kill "$tess"; wait "$tess" 2>/dev/null || true
size=$(sed -n 2p "$src/checkpoint")
echo "source: TesseraCT POSIX log of $size leaves, $(ls "$src/issuer" | wc -l) issuers, written in $(( $(date +%s) - t0 )) s" >&2
hport=$(free_port)
python3 -m http.server --bind 127.0.0.1 "$hport" --directory "$src" >/dev/null 2>&1 &
pids+=($!)
start_minio

# The config of a target of kind $1 named $2 (a tlogd CT log with the source's key).
config() {
  local lport=$3
  printf 'listen = "127.0.0.1:%s"\norigin = "%s"\nprivate_key_file = "%s"\n[metrics]\nlisten = ""\n[ct]\nroots_file = "%s"\n[storage]\n' \
    "$lport" "$origin" "$work/key.pem" "$work/roots.pem"
  case $1 in
    s3) printf 'backend = "s3"\nbucket = "%s"\nregion = "us-east-1"\nendpoint = "http://127.0.0.1:%s"\nallow_http = true\n[dedup]\npath = "%s"\n' \
          "$2" "$s3port" "$work/$2-dedup" ;;
    posix) printf 'dir = "%s"\n' "$work/$2" ;;
  esac
}
target_checkpoint() {
  case $1 in
    s3) curl -sf "${sign[@]}" "http://127.0.0.1:$s3port/$2/checkpoint" || true ;;
    posix) cat "$work/$2/checkpoint" 2>/dev/null || true ;;
  esac
}

# Copy from $2 into a fresh target of kind $1 named $3, killed once, resumed; then
# serve, verify, fsck, continue. Prints a row labelled $4.
migrate() {
  local kind=$1 from=$2 name=$3 label=$4 kills t0 t1 out lport status
  lport=$(free_port)
  config "$kind" "$name" "$lport" > "$work/$name.toml"
  [ "$kind" = s3 ] && curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/$name" >/dev/null
  local args=(migrate --config "$work/$name.toml" --from "$from" --jobs "$jobs" --quiet)
  local total0; total0=$(date +%s.%N)
  "$bin/tlogd" "${args[@]}" >"$work/$name.out" 2>"$work/$name.err" &
  local m=$!
  sleep "$(python3 -c "import random; print(random.uniform(0.2, 0.8))")"
  if kill -9 "$m" 2>/dev/null; then
    wait "$m" 2>/dev/null || true
    local cp; cp=$(target_checkpoint "$kind" "$name")
    if [ -z "$cp" ]; then kills="killed, no checkpoint"
    elif [ "$cp" = "$(cat "$src/checkpoint")" ]; then kills="killed after the copy"
    else echo "FAILED: a checkpoint other than the source's in $name after a kill" >&2; exit 1; fi
  else
    wait "$m" 2>/dev/null || true
    kills="finished before the kill"
  fi
  t0=$(date +%s.%N)
  "$bin/tlogd" "${args[@]}" >"$work/$name.out" 2>"$work/$name.err" ||
    { echo "FAILED: the last run into $name: $(tail -3 "$work/$name.err")" >&2; exit 1; }
  t1=$(date +%s.%N)
  out=$(grep -m1 -E "^copied|nothing to copy" "$work/$name.out" || true)
  RUST_LOG=warn "$bin/tlogd" serve --config "$work/$name.toml" 2>"$work/$name-serve.log" &
  local tl=$!; pids+=("$tl")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$lport/checkpoint" >/dev/null && break; sleep 0.1; done
  local verify fsck cont
  if "$bin/tlogd" verify "http://127.0.0.1:$lport" --ct --origin "$origin" --log-public-key "$pubkey" --quiet >"$work/$name.verify" 2>&1
  then verify=ok; else verify="FAILED ($(tail -1 "$work/$name.verify" | cut -c1-100))"; fi
  status=0
  "$tools/tesseract-fsck" --monitoring_url "http://127.0.0.1:$lport/" --origin "$origin" --public_key "$pubkey" \
    --ui=false -N 8 >"$work/$name.fsck" 2>&1 || status=$?
  fsck=$(fsck_verdict "$work/$name.fsck" "$status")
  if hammer "http://127.0.0.1:$lport/" "http://127.0.0.1:$lport/" $((size + 500)); then cont=ok
  else cont="FAILED ($(grep -m1 '^[EF]' "$work/hammer.err" | cut -c1-100))"; fi
  kill "$tl"; wait "$tl" 2>/dev/null || true
  python3 - "$label" "$size" "$out" "$total0" "$t1" "$verify" "$fsck" "$cont" "$kills" <<'PY'
import re, sys
label, want, out, total0, t1, verify, fsck, cont, kills = sys.argv[1:10]
want = int(want)
m = re.search(r"copied (\d+) entries \((\d+) bundles\) and (\d+) issuers .* ([\d.]+) s: (\d+) entries/s(, resumed at (\d+))?", out)
if m:
    resumed = int(m[7]) if m[7] else 0
    last = f"resumed at {resumed:,}, copied {int(m[1]):,} and {m[3]} issuers in {float(m[4]):.1f} s: {int(m[5]):,} entries/s"
else:
    last = out
overall = want / (float(t1) - float(total0))
print(f"| {label} | {want:,} | {kills} | {last} | {overall:,.0f} entries/s | {verify} | {fsck} | {cont} |")
PY
}

echo "$(pinning); $(lscpu | sed -n 's/^Model name: *//p' | cut -d' ' -f1-3), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "| copy | leaves | kill | last run | overall, kill and restart included | tlogd verify --ct | TesseraCT fsck | hammer continues through tlogd |"
echo "|---|---|---|---|---|---|---|---|"
migrate posix "$src" ctposix "TesseraCT POSIX (directory) → tlogd POSIX"
migrate s3 "http://127.0.0.1:$hport/" ctins3 "TesseraCT POSIX (over HTTP) → S3 (MinIO)"
