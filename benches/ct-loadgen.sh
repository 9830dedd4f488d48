#!/usr/bin/env bash
# tlog-loadgen's CT mode (--ct) against tlogd's CT personality on POSIX: it mints
# GOAL distinct chains up front (ECDSA P-256 leaves under an intermediate of a root it
# minted, 10 % precertificates; not counted), submits them from WRITERS writers with
# 5 % duplicates, verifies every SCT, and checks every entry in the data tiles and its
# inclusion; tlogd's CPU per add comes from --log-pid. Each round a fresh log.
#
# Usage: benches/ct-loadgen.sh GOAL ROUNDS [WRITERS]   (e.g. 20000 3 64)
# Needs: a release build of tlogd and tlog-loadgen (cargo build --release -p tlogd
# -p tlog-loadgen).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
goal=${1:?leaves per run}
rounds=${2:?rounds}
writers=${3:-64}
target="${CARGO_TARGET_DIR:-$HOME/.cache/tlogd-target}"
tlogd="$target/release/tlogd"
loadgen="$target/release/tlog-loadgen"
for b in "$tlogd" "$loadgen"; do
  [ -x "$b" ] || { echo "build first: cargo build --release -p tlogd -p tlog-loadgen" >&2; exit 1; }
done
bench_work ct-loadgen
origin=bench.ct.example/2026
openssl ecparam -name prime256v1 -genkey -noout -out "$work/key.pem" 2>/dev/null
chmod 600 "$work/key.pem"
pubkey=$(openssl ec -in "$work/key.pem" -pubout -outform DER 2>/dev/null | base64 -w0)
"$loadgen" ct-root --cert "$work/root.pem" --key "$work/root-key.pem"
echo "round goal writers adds_per_s new dup precerts tlogd_cpu_us_per_add add_p50_ms add_p99_ms integrate_p50_ms integrate_p99_ms mint_s ok"
for r in $(seq "$rounds"); do
  dir="$work/run-$r"; mkdir -p "$dir"
  port=$(free_port)
  cat >"$dir/tlogd.toml" <<EOF
listen = "127.0.0.1:$port"
origin = "$origin"
private_key_file = "$work/key.pem"
[storage]
dir = "$dir/log"
[ct]
roots_file = "$work/root.pem"
EOF
  RUST_LOG=warn "$tlogd" serve --config "$dir/tlogd.toml" 2>"$dir/daemon.log" &
  pid=$!; pids+=($pid)
  for _ in $(seq 100); do [ -f "$dir/log/checkpoint" ] && break; sleep 0.1; done
  "$loadgen" --ct --log-url "http://127.0.0.1:$port/" --origin "$origin" \
    --log-public-key "$pubkey" --ct-root-cert "$work/root.pem" --ct-root-key "$work/root-key.pem" \
    --ct-precert-chance 0.1 --writers "$writers" --leaf-write-goal "$goal" --dup-chance 0.05 \
    --readers-full 1 --readers-random 1 --log-pid "$pid" --quiet \
    --report-json "$dir/report.json" >"$dir/loadgen.out" 2>&1 || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$r" "$goal" "$writers" "$dir/report.json" <<'PY'
import json, sys
r, goal, writers, path = sys.argv[1:]
try:
    j = json.load(open(path))
except Exception as e:
    print(f"{r} {goal} {writers} no report ({e})"); sys.exit(0)
ops = {o["operation"]: o for o in j.get("operations", [])}
def ms(op, q):
    v = (ops.get(op) or {}).get(q)
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
cpu = j.get("log_cpu_us_per_add")
add = next((k for k in ops if "add" in k), "add")
integ = next((k for k in ops if "integrat" in k), "integrate")
print(r, goal, writers, f"{j['write_rate_per_s']:.0f}", j["writes_new"], j["writes_duplicate"],
      j.get("ct_precerts", "-"), f"{cpu:.0f}" if cpu else "-",
      ms(add, "p50_ms"), ms(add, "p99_ms"), ms(integ, "p50_ms"), ms(integ, "p99_ms"),
      f"{j.get('ct_mint_seconds', 0):.1f}", "ok" if j["ok"] else "FAILED: " + "; ".join(j["failure_reasons"][:2]))
PY
done
