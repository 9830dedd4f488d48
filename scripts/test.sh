#!/usr/bin/env bash
# The test command: installs what it needs, then format, lint and the whole suite.
# Tests and benches share the release profile so RocksDB is compiled once.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh test
source scripts/env.sh
cargo fmt --all --check
cargo clippy --release --workspace --all-targets -- -D warnings
# Bounded: no test may hang CI.
timeout 45m cargo test --release --workspace
