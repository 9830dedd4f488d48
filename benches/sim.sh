#!/usr/bin/env bash
# The seeded simulator (crates/core/tests/simulation.rs) over many schedules: frontends
# on one store, forwarding, lost and shed answers, late commits, crashes and restarts;
# after each schedule every acknowledged entry must be in the log exactly once.
#   SCHEDULES (default 1,000,000), FIRST (default 10,000: after the suite's seeds),
#   JOBS (default: the number of cores; each runs an equal share of the seeds).
# A failure prints TLOGD_SIM_SEED=<n>: replay it with
#   TLOGD_SIM_SEED=<n> cargo test --release -p tlogd-core --test simulation -- --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
schedules=${SCHEDULES:-1000000}
first=${FIRST:-10000}
jobs=${JOBS:-$(nproc)}
bin=$(cargo test --release -p tlogd-core --test simulation --no-run 2>&1 |
  sed -n 's/.*Executable tests\/simulation.rs (\(.*\))/\1/p' | tail -1)
[ -x "$bin" ] || { echo "simulation test binary not found" >&2; exit 1; }
share=$(( (schedules + jobs - 1) / jobs ))
start=$(date +%s)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
pids=()
for j in $(seq 0 $((jobs - 1))); do
  at=$((first + j * share))
  n=$(( share < first + schedules - at ? share : first + schedules - at ))
  [ "$n" -gt 0 ] || continue
  TLOGD_SIM_FIRST=$at TLOGD_SIM_SCHEDULES=$n "$bin" --nocapture 2>&1 |
    grep -E "simulation:|TLOGD_SIM_SEED|test result" | sed "s/^/[seeds $at..$((at + n))] /" | tee -a "$out" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
status=0
grep -q "TLOGD_SIM_SEED\|FAILED" "$out" && status=1
echo "seeds $first..$((first + schedules)): $schedules schedules in $(( $(date +%s) - start )) s, $jobs jobs on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
exit $status
