#!/usr/bin/env bash
# The seeded simulator (crates/core/tests/simulation.rs) over many schedules: both stores
# (SQL-like memory, memory bucket), 1-3 frontends, forwarding through a lossy network,
# crashes of any frontend, lost dedup indexes, freezes; after each schedule: no entry
# twice, none acknowledged and lost, no false "not logged", the checkpoint never back.
#   SCHEDULES (default 1,000,000), FIRST (default 10,000: after the suite's seeds),
#   CHUNK (default 100,000: one process per chunk, so a failure names its range and a
#   hang stops only its chunk), THREADS (default: the number of cores).
# The test binary is run directly, not through cargo, so cargo's lock stays free.
# A failure prints TLOGD_SIM_SEED=<n>: replay it (with its trace) with
#   TLOGD_SIM_SEED=<n> cargo test --release -p tlogd-core --test simulation -- --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
schedules=${SCHEDULES:-1000000}
first=${FIRST:-10000}
chunk=${CHUNK:-100000}
threads=${THREADS:-$(nproc)}
bin=$(cargo test --release -p tlogd-core --test simulation --no-run 2>&1 |
  sed -n 's/.*Executable tests\/simulation.rs (\(.*\))/\1/p' | tail -1)
[ -x "$bin" ] || { echo "simulation test binary not found" >&2; exit 1; }
# A copy: a build meanwhile (another checkout's, a revert tried) must not change what
# the later chunks run.
copy=$(mktemp "${TMPDIR:-/tmp}/simulation.XXXXXX")
trap 'rm -f "$copy"' EXIT
cp "$bin" "$copy" && chmod +x "$copy"
bin=$copy
echo "sim: at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (with local changes)')"
start=$(date +%s)
at=$first
end=$((first + schedules))
failed=0
while [ "$at" -lt "$end" ]; do
  n=$((end - at < chunk ? end - at : chunk))
  set +e
  TLOGD_SIM_FIRST=$at TLOGD_SIM_SCHEDULES=$n TLOGD_SIM_THREADS=$threads "$bin" --nocapture 2>&1 |
    grep -E "^sim:|TLOGD_SIM_SEED=[0-9]+ (failed|hangs|took)|schedules failed|^ +schedule:|^    "
  status=${PIPESTATUS[0]}
  set -e
  [ "$status" -eq 0 ] || { failed=$((failed + 1)); echo "sim: chunk $at..$((at + n)) FAILED"; }
  at=$((at + n))
done
echo "sim: seeds $first..$end: $schedules schedules in $(( $(date +%s) - start )) s, $threads threads on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $failed chunk(s) failed"
[ "$failed" -eq 0 ]
