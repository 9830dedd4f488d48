#!/usr/bin/env bash
# tlog-loadgen's CT mode (--ct) against tlogd's CT personality on POSIX and against
# TesseraCT v0.1.1's POSIX server, one driver for both: it mints GOAL distinct chains
# up front (ECDSA P-256 leaves under an intermediate of a root it minted, 10 %
# precertificates; not counted), submits them from WRITERS writers with 5 %
# duplicates, verifies every SCT, and checks every entry in the data tiles and its
# inclusion; the server's CPU per add comes from --log-pid, over the whole run
# (server_cpu_us_per_add, the checks after writing included: serving their data-tile
# reads) and until writing stopped (server_cpu_us_per_add_writing: the adds, with the
# checkpoint polls and the reader running meanwhile). Each run a fresh log.
# TesseraCT's POSIX server serves no reads: its directory is served by Python's
# http.server (not counted in its CPU).
#
# Usage: benches/ct-loadgen.sh GOAL ROUNDS [WRITERS [MODE...]]   (e.g. 20000 3 64)
# Modes: tlogd (POSIX), tlogd-minio (S3 on a private MinIO), tlogd-mariadb (a private
# MariaDB with durable commits), tesseract (publication awaiter off: answered once
# sequenced, as tlogd does), tesseract-await (its default); default: tlogd tesseract.
# CT_ISSUER_KEY=rsa2048|p256|p384 (default p256): the intermediate's key, which signs
# every leaf. CT_SCT_CHECKS=after|during: when the driver checks each SCT's signature
# (unset: the loadgen's default, after writing stops, off the measured cores). The
# storage server's CPU per add (MinIO, MariaDB) is its own column,
# counted over the whole run (minting included, when it idles).
# Needs: a release build of tlogd and tlog-loadgen (cargo build --release -p tlogd
# -p tlog-loadgen); Go to build TesseraCT's server once.
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
goal=${1:?leaves per run}
rounds=${2:?rounds}
writers=${3:-64}
modes=("${@:4}"); [ ${#modes[@]} -gt 0 ] || modes=(tlogd tesseract)
tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
target="${CARGO_TARGET_DIR:-$HOME/.cache/tlogd-target}"
tlogd="$target/release/tlogd"
loadgen="$target/release/tlog-loadgen"
for b in "$tlogd" "$loadgen"; do
  [ -x "$b" ] || { echo "build first: cargo build --release -p tlogd -p tlog-loadgen" >&2; exit 1; }
done
if [[ " ${modes[*]} " == *" tesseract"* ]] && [ ! -x "$tools/tesseract-posix" ]; then
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-buildvcs=false go install github.com/transparency-dev/tesseract/cmd/tesseract/posix@v0.1.1
  mkdir -p "$tools"; mv "$tmp/posix" "$tools/tesseract-posix"; rm -rf "$tmp"
fi
bench_work ct-loadgen
origin=bench.ct.example/2026
openssl ecparam -name prime256v1 -genkey -noout -out "$work/key.pem" 2>/dev/null
chmod 600 "$work/key.pem"
pubkey=$(openssl ec -in "$work/key.pem" -pubout -outform DER 2>/dev/null | base64 -w0)
"$loadgen" ct-root --cert "$work/root.pem" --key "$work/root-key.pem" >/dev/null
issuer_key=${CT_ISSUER_KEY:-p256}
if [[ " ${modes[*]} " == *" tlogd-minio "* ]]; then start_minio; fi
if [[ " ${modes[*]} " == *" tlogd-mariadb "* ]]; then start_mariadb "$work/mariadb"; fi
echo "# issuer key: $issuer_key; SCT checks: ${CT_SCT_CHECKS:-default (after writing)}"
echo "mode round goal writers adds_per_s new dup precerts server_cpu_us_per_add server_cpu_us_per_add_writing add_p50_ms add_p99_ms integrate_p50_ms integrate_p99_ms mint_s ok store_cpu_us_per_add"
for r in $(seq "$rounds"); do
  for mode in "${modes[@]}"; do
    dir="$work/$mode-$r"; mkdir -p "$dir/log"
    port=$(free_port)
    store_pid=""
    case $mode in
      tlogd|tlogd-minio|tlogd-mariadb)
        case $mode in
          tlogd) storage=$(printf '[storage]\ndir = "%s"\n' "$dir/log") ;;
          tlogd-minio)
            bucket="ct$r$RANDOM"; curl -sf "${sign[@]}" -X PUT "http://127.0.0.1:$s3port/$bucket" >/dev/null
            storage=$(printf '[storage]\nbackend = "s3"\nbucket = "%s"\nregion = "us-east-1"\nendpoint = "http://127.0.0.1:%s"\nallow_http = true\n[dedup]\npath = "%s"\n' \
              "$bucket" "$s3port" "$dir/dedup")
            store_pid=$minio ;;
          tlogd-mariadb)
            db="ct$r$RANDOM"; mariadb -h 127.0.0.1 -P "$myport" -u root -e "create database $db"
            storage=$(printf '[storage]\nbackend = "mysql"\nurl = "mysql://root@127.0.0.1:%s/%s"\n[dedup]\npath = "%s"\n' \
              "$myport" "$db" "$dir/dedup")
            store_pid=$mypid ;;
        esac
        printf 'listen = "127.0.0.1:%s"\norigin = "%s"\nprivate_key_file = "%s"\n%s\n[ct]\nroots_file = "%s"\n' \
          "$port" "$origin" "$work/key.pem" "$storage" "$work/root.pem" >"$dir/tlogd.toml"
        RUST_LOG=warn "$tlogd" serve --config "$dir/tlogd.toml" 2>"$dir/daemon.log" &
        pid=$!; pids+=($pid); read_url="http://127.0.0.1:$port/" ;;
      tesseract|tesseract-await)
        await=false; [ "$mode" = tesseract-await ] && await=true
        "$tools/tesseract-posix" --http_endpoint="127.0.0.1:$port" --origin="$origin" \
          --private_key="$work/key.pem" --roots_pem_file="$work/root.pem" \
          --storage_dir="$dir/log" --enable_publication_awaiter=$await \
          --checkpoint_interval=1s 2>"$dir/daemon.log" &
        pid=$!; pids+=($pid)
        rport=$(free_port)
        (cd "$dir/log" && exec python3 -m http.server "$rport" --bind 127.0.0.1 >/dev/null 2>&1) &
        hpid=$!; pids+=($hpid); read_url="http://127.0.0.1:$rport/" ;;
      *) echo "unknown mode $mode" >&2; exit 2 ;;
    esac
    for _ in $(seq 100); do curl -sf "${read_url}checkpoint" >/dev/null && break; sleep 0.1; done
    st0=0; [ -n "$store_pid" ] && st0=$(ticks_pid "$store_pid")
    "$loadgen" --ct --ct-issuer-key "$issuer_key" --log-url "$read_url" --write-log-url "http://127.0.0.1:$port/" --origin "$origin" \
      --log-public-key "$pubkey" --ct-root-cert "$work/root.pem" --ct-root-key "$work/root-key.pem" \
      --ct-precert-chance 0.1 --writers "$writers" --leaf-write-goal "$goal" --dup-chance 0.05 \
      --readers-full 1 --readers-random 1 --checkpoint-poll 20ms --log-pid "$pid" --quiet \
      ${CT_SCT_CHECKS:+--ct-sct-checks "$CT_SCT_CHECKS"} \
      --report-json "$dir/report.json" >"$dir/loadgen.out" 2>&1 || true
    st1=0; [ -n "$store_pid" ] && st1=$(ticks_pid "$store_pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    if [[ "$mode" == tesseract* ]]; then kill "$hpid"; wait "$hpid" 2>/dev/null || true; fi
    python3 - "$mode" "$r" "$goal" "$writers" "$dir/report.json" $((st1 - st0)) <<'PY'
import json, sys
mode, r, goal, writers, path, store_ticks = sys.argv[1:]
try:
    j = json.load(open(path))
except Exception as e:
    print(f"{mode} {r} {goal} {writers} no report ({e})"); sys.exit(0)
ops = {o["operation"]: o for o in j.get("operations", [])}
add = next((k for k in ops if "add" in k), "add")
integ = next((k for k in ops if "integrat" in k), "integrate")
def ms(op, q):
    v = (ops.get(op) or {}).get(q)
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
cpu = j.get("log_cpu_us_per_add")
cpu_w = j.get("log_cpu_us_per_add_writing")
print(mode, r, goal, writers, f"{j['write_rate_per_s']:.0f}", j["writes_new"], j["writes_duplicate"],
      j.get("ct_precerts", "-"), f"{cpu:.0f}" if cpu else "-", f"{cpu_w:.0f}" if cpu_w else "-",
      ms(add, "p50_ms"), ms(add, "p99_ms"), ms(integ, "p50_ms"), ms(integ, "p99_ms"),
      f"{j.get('ct_mint_seconds', 0):.1f}", "ok" if j["ok"] else "FAILED: " + "; ".join(j["failure_reasons"][:2]),
      f"{int(store_ticks) * 10000 / max(j['writes_new'], 1):.0f}" if int(store_ticks) else "-")
PY
  done
done
