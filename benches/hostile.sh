#!/usr/bin/env bash
# What each attack of #62 costs the other log of the same daemon. One daemon on POSIX
# serves a CT log (/ct, TesseraCT's test root) and a tlog-tiles log (/tiles, its first
# bundle 256 entries of 56 kB: 14 MB); the loadgen drives /tiles (WRITERS writers over
# HTTP/1.1, every entry verified) for SECONDS with no attack, then under each attack of
# `crates/daemon/examples/attack.rs`, made from 127.0.0.2 (the loadgen's 127.0.0.1 is a
# trusted proxy, as the default makes loopback; the attacker is not), rounds
# alternated. Prints one markdown row per run: appends/s, add p50/p99, the CPU seconds
# tlogd and the attacker used during the run (they share this machine's cores with the
# loadgen), the daemon's RSS and threads at the end, and what the attacker got.
#
#   benches/hostile.sh SECONDS ROUNDS [none chains bodies trickle issuers gets] [-- loadgen flags]
#
# `gets` (a flood of `GET <ct>/checkpoint`) is the floor under the floods: what as many
# requests cost whatever they ask.
#
# BIN runs another tlogd build (an old one copied aside) with this tree's attack
# example and loadgen. Needs the release binaries and examples
# (cargo build --release --workspace --all-targets).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
bench_args "$@"
attacks=("${items[@]}")
[ ${#attacks[@]} -ge 1 ] || attacks=(none chains bodies trickle issuers)
rel="$CARGO_TARGET_DIR/release"
bin=${BIN:-$rel/tlogd}
attack="$rel/examples/attack"
[ -x "$attack" ] || { echo "build the examples first: cargo build --release -p tlogd --examples" >&2; exit 1; }
bench_work tlogd-hostile
writers=${WRITERS:-256}
chains_dir=crates/ct/testdata/chains/tesseract
cp "$chains_dir/test_root_ca_cert.pem" "$work/roots.pem"
cat "$chains_dir/test_leaf_cert_signed_by_intermediate.pem" "$chains_dir/test_intermediate_ca_cert.pem" > "$work/chain.pem"
"$bin" keygen --origin bench.example/tiles --out "$work/tiles.key" > "$work/tiles.vkey" 2>/dev/null
"$bin" keygen --ct --origin bench.example/ct --out "$work/ct.key" >/dev/null 2>&1

run() { # attack, loadgen flags...
  local what=$1; shift
  local dir="$work/run-$RANDOM" port
  mkdir -p "$dir"
  port=$(free_port)
  cat > "$dir/tlogd.toml" <<EOF
listen = "127.0.0.1:$port"
metrics.listen = ""
[http]
trusted_proxies = ["127.0.0.1"]
[[logs]]
name = "tiles"
origin = "bench.example/tiles"
private_key_file = "$work/tiles.key"
storage.dir = "$dir/tiles"
[[logs]]
name = "ct"
origin = "bench.example/ct"
private_key_file = "$work/ct.key"
storage.dir = "$dir/ct"
[logs.ct]
roots_file = "$work/roots.pem"
EOF
  "$bin" serve --config "$dir/tlogd.toml" 2>"$dir/tlogd.log" &
  local tl=$!
  pids+=("$tl")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/tiles/checkpoint" >/dev/null && break; sleep 0.1; done
  # The first bundle: 256 entries of 56 kB (the trickling reader's target).
  python3 - "$port" <<'PY'
import sys, urllib.request, concurrent.futures, os
port = sys.argv[1]
def add(i):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tiles/add", data=os.urandom(56000), method="POST")
    return urllib.request.urlopen(req).read()
with concurrent.futures.ThreadPoolExecutor(32) as ex:
    list(ex.map(add, range(256)))
PY
  local at=""
  if [ "$what" != none ]; then
    local extra=(--url "http://127.0.0.1:$port/ct")
    case $what in
      chains) extra+=(--chain-pem "$work/chain.pem" --concurrency 64) ;;
      bodies) extra+=(--concurrency 4) ;;
      trickle) extra=(--url "http://127.0.0.1:$port/tiles" --path tile/entries/000 --streams 19) ;;
      issuers) extra+=(--concurrency 64) ;;
      gets) extra+=(--concurrency 64 --path checkpoint) ;;
    esac
    "$attack" --mode "$what" "${extra[@]}" > "$dir/attack.txt" 2>&1 &
    at=$!
    pids+=("$at")
    # Its set-up first (the chains' RSA key takes seconds), then 3 s of attack alone.
    for _ in $(seq 1200); do grep -q '^ready' "$dir/attack.txt" 2>/dev/null && break; sleep 0.1; done
    sleep 3
  fi
  local t0 a0=0
  t0=$(ticks_pid "$tl")
  [ -n "$at" ] && a0=$(ticks_pid "$at")
  "$rel/tlog-loadgen" --log-url "http://127.0.0.1:$port/tiles" --log-public-key "$(cat "$work/tiles.vkey")" \
    --writers "$writers" --duration "${secs}s" --quiet --report-json "$dir/r.json" "$@" >/dev/null || true
  local rss threads t1 a1=0
  t1=$(ticks_pid "$tl")
  [ -n "$at" ] && a1=$(ticks_pid "$at")
  local cpu="$(( (t1 - t0) / $(getconf CLK_TCK) )) s / $(( (a1 - a0) / $(getconf CLK_TCK) )) s"
  rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$tl/status")
  threads=$(awk '/Threads/ {print $2}' "/proc/$tl/status")
  [ -n "$at" ] && { kill "$at" 2>/dev/null || true; wait "$at" 2>/dev/null || true; }
  kill "$tl"; wait "$tl" 2>/dev/null || true
  python3 - "$what" "$dir/r.json" "$rss" "$threads" "$dir/attack.txt" "$cpu" <<'PY'
import json, sys, os
what, path, rss, threads, attack, cpu = sys.argv[1:7]
r = json.load(open(path))
ops = {o["operation"]: o for o in r["operations"]}
add = ops["add (time in queue)"]
got = ""
if os.path.exists(attack):
    lines = [l for l in open(attack) if l.startswith("{")]
    got = lines[-1].strip() if lines else "(nothing: " + " ".join(open(attack).read().split())[:120] + ")"
verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:200]
print(f"| {what} | {r['tree_growth_per_s']:,.0f} | {add['p50_ms']:.2f} / {add['p99_ms']:.2f} ms | {cpu} | {rss} MiB | {threads} | {verdict} | {got} |", flush=True)
PY
}

echo "| attack | /tiles appends/s | add p50 / p99 | CPU tlogd / attacker | tlogd RSS | threads | loadgen | the attacker got |"
echo "|---|---|---|---|---|---|---|---|"
for _ in $(seq "$rounds"); do
  for a in "${attacks[@]}"; do run "$a" "${loadgen_args[@]}"; done
done
