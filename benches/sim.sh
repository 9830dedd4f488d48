#!/usr/bin/env bash
# The seeded simulator (crates/core/tests/simulation.rs) over many schedules: frontends
# on one store, forwarding, lost and shed answers, late commits, crashes and restarts;
# after each schedule every acknowledged entry must be in the log exactly once.
#   SCHEDULES (default 1,000,000), FIRST (default 10,000: after the suite's seeds),
#   CHUNK (default 100,000: one process per chunk, so a failure names its range).
# A failure prints TLOGD_SIM_SEED=<n>: replay it with
#   TLOGD_SIM_SEED=<n> cargo test --release -p tlogd-core --test simulation -- --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
schedules=${SCHEDULES:-1000000}
first=${FIRST:-10000}
chunk=${CHUNK:-100000}
cargo test --release -p tlogd-core --test simulation --no-run
start=$(date +%s)
at=$first
end=$((first + schedules))
while [ "$at" -lt "$end" ]; do
  n=$((end - at < chunk ? end - at : chunk))
  TLOGD_SIM_FIRST=$at TLOGD_SIM_SCHEDULES=$n \
    cargo test --release -q -p tlogd-core --test simulation -- --nocapture 2>&1 | grep -E "simulation:|TLOGD_SIM_SEED|test result"
  at=$((at + n))
done
echo "seeds $first..$end: $schedules schedules in $(( $(date +%s) - start )) s on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
