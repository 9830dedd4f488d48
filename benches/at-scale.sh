#!/usr/bin/env bash
# One long run of tlogd on POSIX with the dedup index on, under the loadgen (256 writers,
# HTTP/1.1, every entry verified) until GOAL entries or MINUTES: every 60 s one CSV row of
# tree size, appends/s over the last minute, tlogd's RSS, the disk taken by the log and
# by the dedup index, the index's lag and the adds refused so far, tlogd's CPU per append
# over the minute (and the part of it on the dedup index's RocksDB threads, its
# compactions), the loadgen's CPU per append, the mean commit (ms), batch (entries) and
# add (ms, in tlogd from the body read to the answer) over the minute from tlogd's
# metrics, the writers' mean round trip (ms, writers / appends per second), the
# kernel's page cache and the loadgen's RSS, to see whether the rate holds as the index
# grows (and whether the data still fits in memory when it does not).
#
#   benches/at-scale.sh [GOAL entries, default 50000000] [MINUTES, default 45] [DIR, default a temp dir]
#
# The log needs ~175 bytes of disk per entry (entries of 64 bytes, tiles, the index).
# Needs the release binaries (cargo build --release --workspace --all-targets).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
goal="${1:-50000000}"
writers=256
minutes="${2:-45}"
bin="$CARGO_TARGET_DIR/release"
tlogd="${TLOGD_BIN:-$bin/tlogd}"
source benches/lib.sh
bench_work tlogd-scale "${3:-}"
port=$(free_port)
mport=$(free_port)
"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null
"$tlogd" serve --storage-dir "$work/log" --origin bench.example/log --private-key-file "$work/key" \
  --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" 2>"$work/tlogd.log" &
tl=$!
pids+=("$tl")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
"$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
  --writers "$writers" --leaf-write-goal "$goal" --max-runtime "${minutes}m" --log-pid "$tl" --quiet \
  --report-json "$work/r.json" > "$work/loadgen.out" 2>&1 &
lg=$!
pids+=("$lg")
size() { curl -sf --max-time 10 "http://127.0.0.1:$port/checkpoint" | sed -n 2p || true; }
# The dedup index's lag behind the tree (entries) and the adds answered with anything
# but an index so far (503 pushback when the index lags by more than dedup.max_lag),
# from one scrape of tlogd's metrics.
scrape() { curl -sf --max-time 10 "http://127.0.0.1:$mport/metrics" || true; }
echo "minute,tree_size,appends_per_s,tlogd_rss_mib,log_disk_mib,dedup_disk_mib,dedup_lag,adds_refused,tlogd_us_per_append,rocksdb_us_per_append,loadgen_us_per_append,commit_ms,batch,add_ms,round_trip_ms,page_cache_mib,loadgen_rss_mib"
last=$(size); m=0; hz=$(getconf CLK_TCK)
# The commit histogram's and the accepted adds' sums and counts, from one scrape:
# "SUM COUNT ADD_SUM ADD_COUNT".
commits() { awk '$1 ~ /^tlogd_commit_duration_seconds_sum/ {s = $2} $1 ~ /^tlogd_commit_duration_seconds_count/ {c = $2}
  $1 == "tlogd_add_duration_seconds_sum{log=\"default\",outcome=\"ok\"}" {as = $2} $1 == "tlogd_add_duration_seconds_count{log=\"default\",outcome=\"ok\"}" {ac = $2}
  END {printf "%s %d %s %d", s + 0, c, as + 0, ac}'; }
read -r last_csum last_ccount last_asum last_acount <<< "$(scrape | commits)"
last_ticks=$(ticks_pid "$tl"); last_rocks=$(ticks_threads "$tl" rocksdb); last_lg=$(ticks_pid "$lg")
per_append() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN {if (n > 0) printf "%.1f", t / hz * 1e6 / n}'; }
while kill -0 "$lg" 2>/dev/null; do
  for _ in $(seq 60); do kill -0 "$lg" 2>/dev/null || break; sleep 1; done
  kill -0 "$lg" 2>/dev/null || break
  m=$((m + 1)); now=$(size); now=${now:-$last}
  rss=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$tl/status")
  # Files come and go under du (partials collected, compactions): it then complains
  # and fails, but still counts the rest.
  dedup=$(du -sm "$work/log/.tlogd/dedup" 2>/dev/null | cut -f1 || true)
  logmb=$(du -sm "$work/log" 2>/dev/null | cut -f1 || true)
  metrics=$(scrape)
  lag=$(awk '$1 == "tlogd_dedup_lag" {printf "%d", $2}' <<< "$metrics")
  refused=$(awk 'index($1, "tlogd_add_requests_total{") == 1 && $1 !~ /outcome="(ok|duplicate)"/ {s += $NF}
    END {printf "%d", s}' <<< "$metrics")
  ticks=$(ticks_pid "$tl"); rocks=$(ticks_threads "$tl" rocksdb); lgt=$(ticks_pid "$lg" 2>/dev/null || echo "$last_lg")
  cache=$(awk '/^Cached:/ {print int($2 / 1024)}' /proc/meminfo)
  lgrss=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$lg/status" 2>/dev/null || true)
  read -r csum ccount asum acount <<< "$(commits <<< "$metrics")"
  commit=$(awk -v s="$csum" -v ps="$last_csum" -v c="$ccount" -v pc="$last_ccount" -v n=$((now - last)) \
    -v w="$writers" -v as="$asum" -v pas="$last_asum" -v ac="$acount" -v pac="$last_acount" \
    'BEGIN {if (c > pc) printf "%.3f,%.0f,", (s - ps) / (c - pc) * 1000, n / (c - pc); else printf ",,"
      if (ac > pac) printf "%.3f,", (as - pas) / (ac - pac) * 1000; else printf ","
      if (n > 0) printf "%.3f", w / (n / 60) * 1000}')
  echo "$m,$now,$(( (now - last) / 60 )),$rss,$logmb,$dedup,$lag,$refused,$(per_append $((ticks - last_ticks)) $((now - last))),$(per_append $((rocks - last_rocks)) $((now - last))),$(per_append $((lgt - last_lg)) $((now - last))),$commit,$cache,$lgrss"
  last=$now; last_ticks=$ticks; last_rocks=$rocks; last_lg=$lgt; last_csum=$csum; last_ccount=$ccount; last_asum=$asum; last_acount=$acount
done
wait "$lg" || true
# Stopped as an operator would (SIGTERM): the dedup index writes out its newest entries
# and saves its filter, so a later run on this directory (AB_LOG_DIR) starts warm.
kill "$tl" 2>/dev/null && wait "$tl" 2>/dev/null || true
python3 - "$work/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"# loadgen: {r['writes_new']:,} new adds, tree growth {r['tree_growth_per_s']:,.0f}/s over {r['write_seconds']:.0f} s, "
      f"tlogd {r['log_cpu_us_per_add']:.1f} µs CPU/add, verify backlog max {r['verify_backlog_max']:,} "
      f"(drained in {r['verify_drain_seconds']:.1f} s), ok={r['ok']} {'; '.join(r['failure_reasons'])[:300]}")
PY
