#!/usr/bin/env bash
# Run tlogd on the embedded default (POSIX files + RocksDB dedup index), no external
# service. Data and key go to ./tlogd-data (override with TLOGD_DATA). Ctrl-C stops it
# cleanly (queue drained, final checkpoint published).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
source scripts/env.sh
data="${TLOGD_DATA:-$PWD/tlogd-data}"
origin="${TLOGD_ORIGIN:-example.com/log/dev}"
# The test command's build (`cargo test --release --workspace`): `cargo build -p tlogd`
# would unify features differently and compile tlogd a second time.
cargo test --release --workspace --no-run
bin="$CARGO_TARGET_DIR/release/tlogd"
mkdir -p "$data"
[ -f "$data/log.key" ] || "$bin" keygen --origin "$origin" --out "$data/log.key" > "$data/log.vkey"
echo "verifier key: $(cat "$data/log.vkey")"
exec "$bin" serve --storage-dir "$data/log" --origin "$origin" \
  --private-key-file "$data/log.key" --listen "${TLOGD_LISTEN:-127.0.0.1:2024}" "$@"
