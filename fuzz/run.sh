#!/usr/bin/env bash
# Run the AFL++ fuzz targets one after another, each for SECONDS (default 600), at the
# lowest CPU priority (the machine is shared). Needs cargo-afl (`cargo install
# cargo-afl`, which builds AFL++ for the installed stable toolchain); the ordinary test
# suite does not. Usage: fuzz/run.sh [SECONDS] [TARGET...]; results and findings go to
# $FUZZ_OUT (default /tmp/tlogd-fuzz), a summary line per target to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(tile note keys witness config verify_log ct)
out=${FUZZ_OUT:-/tmp/tlogd-fuzz}
# Instrumented builds go to a target directory of their own: other RUSTFLAGS would
# otherwise rebuild the ordinary one.
export CARGO_TARGET_DIR=${AFL_TARGET_DIR:-$HOME/.cache/tlogd-target-afl}
cargo afl build --release -p tlogd-fuzz --features afl --bins
export AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
for t in "${targets[@]}"; do
  mkdir -p "$out"
  nice -n 19 cargo afl fuzz -i "fuzz/corpus/$t" -o "$out/$t" -V "$secs" \
    "$CARGO_TARGET_DIR/release/fuzz_$t" >"$out/$t.log" 2>&1 || true
  s="$out/$t/default/fuzzer_stats"
  if [ -f "$s" ]; then
    get() { awk -F' *: *' -v k="$1" '$1==k {print $2}' "$s"; }
    echo "$t: $(get run_time) s, $(get execs_done) execs, $(get corpus_count) corpus, $(get saved_crashes) crashes, $(get saved_hangs) hangs"
  else
    echo "$t: no stats (see $out/$t.log)"
  fi
done
