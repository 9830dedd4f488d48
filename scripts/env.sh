# Sourced by the scripts: one shared build directory outside the clone, so RocksDB's
# ~25-minute C++ build is paid once per machine, not once per clone.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tlogd-target}"
