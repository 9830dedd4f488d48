#!/usr/bin/env bash
# TesseraCT's own CT hammer against tlogd's CT personality and against TesseraCT's
# POSIX server (v0.1.1), side by side, alternating, on the same filesystem: how long
# each takes to grow its log by GOAL leaves from WRITERS concurrent add-chain writers
# (10 % duplicates), and the daemon's CPU per added leaf. Each run starts a fresh log.
#
# Usage: benches/ct-hammer.sh GOAL ROUNDS [WRITERS]   (e.g. 20000 3 256)
# Modes per round: tlogd; tesseract (publication awaiter on, its default: an add is
# answered once a checkpoint covers it); tesseract-noawait (answered once sequenced,
# which is what tlogd does).
# CT_HAMMER_MODES picks modes (default all three); TLOGD_BIN runs another tlogd build.
# Each row says how many of the hammer's requests failed with EOF (a connection the
# server closed as the request was sent: the keep-alive race of #61).
# Needs: a release build of tlogd (cargo build --release -p tlogd), ct-hammer and
# ctclient from scripts/deps.sh test, and Go to build TesseraCT's server once.
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
goal=${1:?leaves per run}
rounds=${2:?rounds}
writers=${3:-256}
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
target="${CARGO_TARGET_DIR:-$HOME/.cache/tlogd-target}"
tlogd="${TLOGD_BIN:-$target/release/tlogd}"
[ -x "$tlogd" ] || { echo "build tlogd first: cargo build --release -p tlogd" >&2; exit 1; }
[ -x "$tools/ct-hammer" ] || { echo "run scripts/deps.sh test first (ct-hammer)" >&2; exit 1; }
if [ ! -x "$tools/tesseract-posix" ]; then
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-buildvcs=false go install github.com/transparency-dev/tesseract/cmd/tesseract/posix@v0.1.1
  mv "$tmp/posix" "$tools/tesseract-posix"; rm -rf "$tmp"
fi
bench_work ct-hammer
testdata=crates/ct/testdata/chains/tesseract/hammer
origin=bench.ct.example/2026
openssl ecparam -name prime256v1 -genkey -noout -out "$work/key.pem" 2>/dev/null
pubkey=$(openssl ec -in "$work/key.pem" -pubout -outform DER 2>/dev/null | base64 -w0)
cp "$testdata/test_root_ca_cert.pem" "$work/roots.pem"
echo "mode goal writers seconds leaves_per_s daemon_cpu_s cpu_us_per_leaf"

run_hammer() { # read_url write_url
  "$tools/ct-hammer" --origin="$origin" --log_public_key="$pubkey" \
    --log_url="$1" --write_log_url="$2" \
    --intermediate_ca_cert_path="$testdata/test_intermediate_ca_cert.pem" \
    --intermediate_ca_key_path="$testdata/test_intermediate_ca_private_key.pem" \
    --cert_sign_private_key_path="$testdata/test_leaf_cert_signing_private_key.pem" \
    --num_writers="$writers" --max_write_ops=100000 --num_readers_random=0 \
    --num_readers_full=0 --max_read_ops=0 --num_mmd_verifiers=0 --dup_chance=0.1 \
    --leaf_write_goal="$goal" --max_runtime=600s --show_ui=false --logtostderr \
    >"$work/hammer.out" 2>"$work/hammer.err"
}

for r in $(seq "$rounds"); do
  for mode in ${CT_HAMMER_MODES:-tlogd tesseract tesseract-noawait}; do
    dir="$work/$mode-$r"; mkdir -p "$dir"
    port=$(free_port)
    case $mode in
      tlogd)
        cat >"$dir/tlogd.toml" <<EOF
listen = "127.0.0.1:$port"
origin = "$origin"
private_key_file = "$work/key.pem"
[storage]
dir = "$dir/log"
[ct]
roots_file = "$work/roots.pem"
EOF
        chmod 600 "$work/key.pem"
        RUST_LOG=warn "$tlogd" serve --config "$dir/tlogd.toml" 2>"$dir/daemon.log" &
        pid=$!; read_url="http://127.0.0.1:$port/"; write_url=$read_url ;;
      tesseract*)
        await=true; [ "$mode" = tesseract-noawait ] && await=false
        "$tools/tesseract-posix" --http_endpoint="127.0.0.1:$port" --origin="$origin" \
          --private_key="$work/key.pem" --roots_pem_file="$work/roots.pem" \
          --storage_dir="$dir/log" --enable_publication_awaiter=$await \
          --checkpoint_interval=1s 2>"$dir/daemon.log" &
        pid=$!; read_url="file://$dir/log/"; write_url="http://127.0.0.1:$port/" ;;
    esac
    pids+=($pid)
    for _ in $(seq 100); do [ -f "$dir/log/checkpoint" ] && break; sleep 0.1; done
    start_ticks=$(ticks_pid "$pid")
    t0=$(date +%s.%N)
    if run_hammer "$read_url" "$write_url"; then status=ok; else status=FAILED; fi
    t1=$(date +%s.%N)
    ticks=$(( $(ticks_pid "$pid") - start_ticks ))
    kill "$pid"; wait "$pid" 2>/dev/null || true
    warnings=$(grep -c '^[WEF]' "$work/hammer.err" || true)
    eofs=$(grep -c 'EOF' "$work/hammer.err" || true)
    python3 - "$mode" "$goal" "$writers" "$t0" "$t1" "$ticks" "$status" "$warnings" "$eofs" <<'PY'
import os, sys
mode, goal, writers, t0, t1, ticks, status, warnings, eofs = sys.argv[1:]
secs = float(t1) - float(t0)
cpu = int(ticks) / os.sysconf("SC_CLK_TCK")
note = f"  (EOF {eofs})" if status == "ok" and warnings == "0" else f"  ({status}, {warnings} warning/error lines, EOF {eofs})"
print(f"{mode} {goal} {writers} {secs:.1f} {int(goal) / secs:.0f} {cpu:.1f} {cpu * 1e6 / int(goal):.0f}{note}")
PY
  done
done
