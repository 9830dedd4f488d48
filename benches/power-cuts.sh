#!/usr/bin/env bash
# Power cuts under load (issue #36): tlogd on the POSIX backend with its RocksDB dedup
# index, both on a faultfs mount; writers add entries and record every index tlogd
# acknowledged; at a random moment `faultfs cut` loses everything not yet durable (all
# of it, or a seeded subset with torn writes); then the mount comes back, tlogd
# restarts on it, and benches/power_cut_check.py checks that every acknowledged entry
# is at its index, the checkpoint never went back, and resubmitted entries get their
# original index; `tlogd verify` then checks the whole log. The log keeps growing
# across cuts.
#
# Usage: benches/power-cuts.sh CUTS [MODE [PROFILE [WRITERS]]]
#   MODE: all (default) | subset (seed = the cut's number)
#   PROFILE: faultfs latency profile, none (default) | cloud-block | network
#   env SYNC: tlogd's storage.sync, auto (default: fsync on faultfs) | syncfs | fsync
#   env SERVER: tlogd (default) | tessera (Go Tessera v1.0.4's POSIX server, for the record)
# Needs: root, /dev/fuse, fusermount3 (scripts/deps.sh test), release builds of tlogd
# and faultfs (the test command's build), python3. One JSON line per cut on stdout, and
# a summary; logs under $TMPDIR/tlogd-power-cuts.*.
set -euo pipefail
cd "$(dirname "$0")/.."
cuts="${1:?usage: benches/power-cuts.sh CUTS [MODE [PROFILE [WRITERS]]]}"
mode="${2:-all}"
profile="${3:-none}"
writers="${4:-16}"
sync="${SYNC:-auto}"
server="${SERVER:-tlogd}"
if [ "$server" = tessera ]; then
  # For the record: the same cuts under Go Tessera v1.0.4's POSIX conformance server
  # (its in-memory antispam, as it ships: a resubmission after a restart is logged
  # again, which the check reports apart from lost entries).
  source benches/lib.sh
  tessera_tool cmd/conformance/posix
  tessera="$gobin/posix"
  sync=n/a
fi
bin="${CARGO_TARGET_DIR:-target}/release"
for b in tlogd faultfs; do
  [ -x "$bin/$b" ] || { echo "build first: cargo test --release --workspace --no-run" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/tlogd-power-cuts.XXXXXX")
backing="$work/backing" mnt="$work/mnt"
mkdir -p "$backing" "$mnt"
origin="example.com/power-cuts"
"$bin/tlogd" keygen --origin "$origin" --out "$work/log.key" > "$work/log.vkey"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
tlogd_pid=""
cleanup() {
  [ -n "$tlogd_pid" ] && kill -9 "$tlogd_pid" 2>/dev/null || true
  "$bin/faultfs" umount "$mnt" >/dev/null 2>&1 || true
}
trap cleanup EXIT

mount_fs() { "$bin/faultfs" mount --background --profile "$profile" "$backing" "$mnt" > "$work/faultfs.pid"; }
start_tlogd() {
  if [ "$server" = tessera ]; then
    "$tessera" -storage_dir "$mnt/log" -private_key "$work/log.key" -listen "127.0.0.1:$port" \
      >> "$work/tlogd.log" 2>&1 &
  else
    "$bin/tlogd" serve --storage-dir "$mnt/log" --origin "$origin" --storage-sync "$sync" \
      --private-key-file "$work/log.key" --listen "127.0.0.1:$port" \
      >> "$work/tlogd.log" 2>&1 &
  fi
  tlogd_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "$url/checkpoint" > /dev/null 2>&1 && return 0
    kill -0 "$tlogd_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
size_now() { curl -sf "$url/checkpoint" | sed -n 2p; }

mount_fs
start_tlogd || { echo "tlogd did not start; see $work/tlogd.log" >&2; exit 1; }
ok=0 failed=0 nothing=0
for i in $(seq 1 "$cuts"); do
  rm -f "$work/stop"
  python3 benches/power_cut_check.py write "$url" "$work/acked.tsv" "$work/stop" "$writers" "cut$i" &
  writer=$!
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.5, 4.0), 2))')"
  before=$(size_now || echo 0)
  cp "$work/acked.tsv.checkpoint" "$work/checkpoint-before-$i" 2>/dev/null || true
  if [ "$mode" = subset ]; then
    "$bin/faultfs" cut --subset "$i" --json "$mnt" > "$work/cut-$i.json" || true
  else
    "$bin/faultfs" cut --json "$mnt" > "$work/cut-$i.json" || true
  fi
  touch "$work/stop"
  kill -9 "$tlogd_pid" 2>/dev/null || true
  wait "$tlogd_pid" 2>/dev/null || true
  tlogd_pid=""
  wait "$writer" || true
  "$bin/faultfs" umount "$mnt" > /dev/null 2>&1 || true
  mount_fs
  if ! start_tlogd; then
    echo "{\"cut\": $i, \"ok\": false, \"why\": \"tlogd did not restart\"}"
    failed=$((failed + 1))
    tail -5 "$work/tlogd.log" >&2
    break
  fi
  check=$(python3 benches/power_cut_check.py check "$url" "$work/acked.tsv" "${before:-0}") || true
  verify=ok
  earlier=()
  [ -s "$work/checkpoint-before-$i" ] && earlier=(--earlier-checkpoint "$work/checkpoint-before-$i")
  "$bin/tlogd" verify "$url" --log-public-key "$(cat "$work/log.vkey")" "${earlier[@]}" > "$work/verify-$i.log" 2>&1 || verify=FAIL
  discarded=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['discarded_data_ops'] + r['discarded_namespace_ops'] + r['torn_writes'])" "$work/cut-$i.json" 2>/dev/null || echo '?')
  during=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' / '.join(o['op'] + ' ' + o['path'] for o in r['last_ops'][-2:]))" "$work/cut-$i.json" 2>/dev/null || echo '?')
  echo "{\"cut\": $i, \"discarded\": \"$discarded\", \"during\": \"$during\", \"verify\": \"$verify\", \"check\": $check}"
  [ "$discarded" = 0 ] && nothing=$((nothing + 1))
  if [ "$verify" = ok ] && echo "$check" | grep -q '"ok": true'; then ok=$((ok + 1)); else failed=$((failed + 1)); fi
done
echo "cuts: $cuts, survived: $ok, failed: $failed, cuts that discarded nothing: $nothing (server $server, mode $mode, profile $profile, sync $sync, $writers writers; logs in $work)"
[ "$failed" = 0 ]
