#!/usr/bin/env bash
# tlogd over HTTPS against plain HTTP (#61), POSIX, dedup on, the loadgen's writers
# (256 unless HTTPS_WRITERS says otherwise) on HTTP/1.1 keep-alive, every entry
# verified; runs alternated. HTTPS: `[tls]` with an ECDSA P-256 certificate from a CA
# made for the run (rustls with ring; TLS 1.3 is what the loadgen and tlogd agree on),
# the loadgen trusting it through SSL_CERT_FILE. Prints one markdown row per run and
# the mean of each: appends/s, tlogd CPU per append, the loadgen's CPU per add, add
# latency, time to integrate. Results go to benches/README.md and the history by hand.
#
#   benches/https.sh SECONDS ROUNDS [http https h2c h2 ...] [-- extra loadgen flags]
#
# Modes: `http` and `https` (HTTP/1.1, a connection per writer), `h2c` (HTTP/2 without
# TLS) and `h2` (HTTP/2 over TLS, ALPN h2), the writers' adds multiplexed on one
# connection per 100 writers. PIN=1 puts tlogd on core 1 and the loadgen on core 0
# (benches/lib.sh).
#
# Needs the release binaries (cargo build --release --workspace --all-targets) and openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source benches/lib.sh
bench_args "$@"
modes=("${items[@]}")
[ ${#modes[@]} -ge 1 ] || modes=(http https)
bin="$CARGO_TARGET_DIR/release"
bench_work tlogd-https
"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

# A CA and a certificate for localhost and 127.0.0.1 it signs.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=bench-ca -keyout "$work/ca-key.pem" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
  -keyout "$work/key.pem" -out "$work/req.pem" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$work/ext"
openssl x509 -req -in "$work/req.pem" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" -CAcreateserial \
  -days 2 -extfile "$work/ext" -out "$work/cert.pem" 2>/dev/null

run() { # mode, loadgen flags...
  local mode=$1; shift
  local port dir="$work/log-$RANDOM" url
  port=$(free_port)
  printf 'listen = "127.0.0.1:%s"\norigin = "bench.example/log"\nprivate_key_file = "%s"\n[storage]\ndir = "%s"\n[metrics]\nlisten = ""\n' \
    "$port" "$work/key" "$dir" > "$work/tlogd.toml"
  local h2=()
  case $mode in h2c|h2) h2=(--h2c) ;; esac
  if [ "$mode" = https ] || [ "$mode" = h2 ]; then
    printf '[tls]\ncert_file = "%s"\nkey_file = "%s"\n' "$work/cert.pem" "$work/key.pem" >> "$work/tlogd.toml"
    url="https://localhost:$port"
  else
    url="http://127.0.0.1:$port"
  fi
  "${on_server_core[@]}" "$bin/tlogd" serve --config "$work/tlogd.toml" 2>"$work/tlogd.log" &
  local tl=$!
  pids+=("$tl")
  for _ in $(seq 600); do curl -sf --cacert "$work/ca.pem" "$url/checkpoint" >/dev/null && break; sleep 0.1; done
  rm -f "$work/r.json"  # a loadgen that fails writes none: no row from an older run
  SSL_CERT_FILE="$work/ca.pem" "${on_driver_core[@]}" "$bin/tlog-loadgen" --log-url "$url" \
    --log-public-key "$(cat "$work/vkey")" --writers "${HTTPS_WRITERS:-256}" --duration "${secs}s" \
    --log-pid "$tl" --quiet --report-json "$work/r.json" "${h2[@]}" "$@" >/dev/null || true
  kill "$tl"; wait "$tl" 2>/dev/null || true
  rm -rf "$dir"
  bench_row "$work/r.json" "$mode" "$work/rows" tree_growth_per_s tti
}

echo "$(pinning); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +'%F %H:%M UTC')"
echo "| mode | appends/s | tlogd CPU/append | loadgen CPU/add | add p50 / p99 | time to integrate p50 / p99 | |"
echo "|---|---|---|---|---|---|---|"
bench_rounds "$rounds" ${#modes[@]} "${modes[@]}" "${loadgen_args[@]}"
bench_means "$work/rows"
