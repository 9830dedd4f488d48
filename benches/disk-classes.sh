#!/usr/bin/env bash
# Disk classes (issue #36): tlogd (POSIX, dedup on, storage.sync = auto) beside Go
# Trillian Tessera v1.0.4's POSIX server, one driver for both (tlog-loadgen, every entry
# verified), on each class of disk this machine can give: local ext4 (the VM's virtual
# disk), tmpfs, XFS on a loop device, and faultfs over ext4 with its latency profiles
# (none: the FUSE pass-through's own cost; cloud-block: fsync ~1 ms; network: fsync
# 5-10 ms, create/rename/unlink/open 1-2 ms). Runs alternate between the two servers,
# a fresh log per run. One markdown row per run: appends/s (checkpoint growth), the
# server's CPU per append, add p50/p99, time to integrate p99, and the server's
# fsync/fdatasync/syncfs calls per second (perf's syscall tracepoints, whole process).
# Results go to benches/README.md ("Disk classes") by hand.
#
#   benches/disk-classes.sh [seconds per run, default 20] [pairs, default 1] [class...]
#   classes: ext4 tmpfs xfs faultfs faultfs-cloud-block faultfs-network (default: all)
#
# Needs root (mounts), perf, the release binaries (cargo test --release --workspace
# --no-run), Go (Tessera's server is built once into $TESSERA_BIN, default
# ~/.cache/tlogd-tools/tessera), xfsprogs for xfs (installed if missing), fuse3.
# DC_WRITERS sets the loadgen's writers (default 256); VS_VARIANTS picks the servers
# (default "go tlogd"; "tlogd-fsync" is tlogd with storage.sync = fsync forced).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
secs="${1:-20}"
pairs="${2:-1}"
shift $(($# > 2 ? 2 : $#))
classes=("$@")
[ ${#classes[@]} -gt 0 ] || classes=(ext4 tmpfs xfs faultfs faultfs-cloud-block faultfs-network)
bin="$CARGO_TARGET_DIR/release"
command -v perf >/dev/null || { echo "perf is needed to count fsyncs (apt-get install linux-perf)" >&2; exit 1; }
source benches/lib.sh
tessera_tool cmd/conformance/posix
bench_work tlogd-disk-classes
mounts=()
unmount_all() {
  for m in "${mounts[@]}"; do
    "$bin/faultfs" umount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true
  done
  bench_cleanup
}
trap unmount_all EXIT

"$bin/tlogd" keygen --origin bench.example/log --out "$work/key" > "$work/vkey" 2>/dev/null

# Mount the directory of a class once; sets `d` to its path.
class_dir() {
  local c=$1
  d="$work/$1"
  mkdir -p "$d"
  case "$c" in
    ext4) ;;
    tmpfs) mount -t tmpfs -o size=4g tmpfs "$d"; mounts+=("$d") ;;
    xfs)
      command -v mkfs.xfs >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs >/dev/null
      truncate -s 8G "$work/xfs.img"
      mkfs.xfs -q "$work/xfs.img"
      mount -o loop "$work/xfs.img" "$d"; mounts+=("$d") ;;
    faultfs*)
      local profile=none
      [ "$c" = faultfs ] || profile=${c#faultfs-}
      mkdir -p "$work/$c-backing"
      "$bin/faultfs" mount --background --profile "$profile" "$work/$c-backing" "$d" > /dev/null
      mounts+=("$d") ;;
    *) echo "unknown class $c" >&2; exit 1 ;;
  esac
}

run() { # class dir which
  local class=$1 root=$2 which=$3
  local port dir="$root/log-$RANDOM" label
  port=$(free_port)
  case "$which" in
    go) label="Go Tessera POSIX"
      "$gobin/posix" -storage_dir "$dir" -private_key "$work/key" -listen "127.0.0.1:$port" 2>"$work/server.log" & ;;
    tlogd|tlogd-fsync) label="tlogd POSIX, dedup"
      local sync=auto
      [ "$which" = tlogd-fsync ] && sync=fsync
      "$bin/tlogd" serve --storage-dir "$dir" --origin bench.example/log --private-key-file "$work/key" \
        --listen "127.0.0.1:$port" --metrics-listen "" --storage-sync "$sync" 2>"$work/server.log" & ;;
  esac
  local server=$!
  pids+=("$server")
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/checkpoint" >/dev/null && break; sleep 0.1; done
  if [ "$which" != go ]; then
    label="$label, sync $(sed 's/\x1b\[[0-9;]*m//g' "$work/server.log" | grep -o 'method=[a-z]*' | head -1 | cut -d= -f2 || true)"
  fi
  perf stat -x, -o "$work/perf.txt" \
    -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_syncfs -p "$server" &
  local perf=$!
  rm -f "$work/r.json"
  "$bin/tlog-loadgen" --log-url "http://127.0.0.1:$port" --log-public-key "$(cat "$work/vkey")" \
    --writers "${DC_WRITERS:-256}" --duration "${secs}s" --log-pid "$server" --quiet \
    --report-json "$work/r.json" >/dev/null || true
  kill -INT "$perf"; wait "$perf" 2>/dev/null || true
  kill "$server"; wait "$server" 2>/dev/null || true
  rm -rf "$dir"
  [ -s "$work/r.json" ] || { echo "| $class | $label | no report: see $work/server.log |"; tail -3 "$work/server.log" >&2; return; }
  python3 - "$work/r.json" "$class" "$label" "$work/perf.txt" "$secs" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); cls, label, secs = sys.argv[2], sys.argv[3], float(sys.argv[5])
calls = {}
for line in open(sys.argv[4]):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].isdigit():
        calls[f[2].rsplit("_", 1)[-1]] = int(f[0])
sync = " + ".join(f"{calls.get(k, 0) / secs:,.0f} {k}" for k in ("fsync", "fdatasync", "syncfs"))
ops = {o["operation"]: o for o in r["operations"]}
add, tti = ops.get("add (time in queue)", {}), ops.get("time to integrate", {})
f = lambda o, k: o.get(k, float("nan"))
verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["failure_reasons"])[:200]
print(f"| {cls} | {label} | {r['tree_growth_per_s']:,.0f} | {r['log_cpu_us_per_add']:.1f} µs | "
      f"{f(add,'p50_ms'):.1f} / {f(add,'p99_ms'):.1f} ms | {f(tti,'p99_ms'):.0f} ms | {sync} | {verdict} |")
EOF
}

variants=(go tlogd)
[ -n "${VS_VARIANTS:-}" ] && read -ra variants <<<"$VS_VARIANTS"
echo "| class | server | appends/s | server CPU/append | add p50 / p99 | time to integrate p99 | syncs per second | |"
echo "|---|---|---|---|---|---|---|---|"
for c in "${classes[@]}"; do
  class_dir "$c"
  for i in $(seq "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then order=("${variants[@]}"); else order=(); for ((j=${#variants[@]}-1; j>=0; j--)); do order+=("${variants[j]}"); done; fi
    for v in "${order[@]}"; do run "$c" "$d" "$v"; done
  done
done
