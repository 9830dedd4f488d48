#!/usr/bin/env bash
# Does a FUSE filesystem served through /dev/fuse see syncfs(2)? Mounts faultfs, traces
# the requests its server reads from /dev/fuse (strace decodes nothing of FUSE, so the
# opcode is taken from the raw fuse_in_header), and prints the requests each step
# caused: syncfs on a file, syncfs on the mount's root, sync(2), and as a control an
# fsync (FUSE_FSYNC, 20). FUSE_SYNCFS is opcode 50.
#
#   crates/faultfs/scripts/syncfs-probe.sh [path/to/faultfs]
#
# Needs root, /dev/fuse, fusermount3, strace, python3.
set -euo pipefail
exe=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/tlogd-target}/release/faultfs}
[ -x "$exe" ] || { echo "no faultfs binary at $exe (cargo build --release -p faultfs)" >&2; exit 1; }
command -v strace >/dev/null || { echo "strace is needed (apt-get install strace)" >&2; exit 1; }
tmp=$(mktemp -d)
mkdir "$tmp/b" "$tmp/m"
pid=$("$exe" mount --background "$tmp/b" "$tmp/m")
cleanup() {
  [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null || true
  "$exe" umount "$tmp/m" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
strace -f -p "$pid" -e trace=read -xx -s 96 -o "$tmp/trace" 2>/dev/null &
spid=$!
sleep 1
mark() { stat "$tmp/m/MARK-$1" >/dev/null 2>&1 || true; sleep 0.2; }
echo data > "$tmp/m/file"
mark syncfs-file;  sync -f "$tmp/m/file"
mark syncfs-root;  sync -f "$tmp/m"
mark sync;         sync
mark fsync;        python3 -c "import os; fd=os.open('$tmp/m/file', os.O_RDONLY); os.fsync(fd); os.close(fd)"
mark end
sleep 0.5
kill "$spid"; wait "$spid" 2>/dev/null || true; spid=
python3 - "$tmp/trace" <<'EOF'
import re, sys
names = {1: "LOOKUP", 3: "GETATTR", 4: "SETATTR", 14: "OPEN", 15: "READ", 16: "WRITE",
         17: "STATFS", 18: "RELEASE", 20: "FSYNC", 22: "GETXATTR", 25: "FLUSH",
         27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR", 30: "FSYNCDIR", 34: "ACCESS",
         35: "CREATE", 50: "SYNCFS"}
step, seen = "setup", {}
order = ["setup"]
for line in open(sys.argv[1]):
    m = re.search(r'"((?:\\x[0-9a-f]{2})+)"', line)
    if not m or "read" not in line:
        continue
    b = bytes(int(h, 16) for h in re.findall(r"\\x([0-9a-f]{2})", m.group(1)))
    if len(b) < 40:
        continue
    op = int.from_bytes(b[4:8], "little")
    if op == 1:
        name = b[40:].split(b"\0")[0].decode(errors="replace")
        if name.startswith("MARK-"):
            step = name[5:]
            order.append(step)
            continue
    seen.setdefault(step, []).append(f"{names.get(op, '?')}({op})")
for s in order:
    if s != "end":
        print(f"{s:12} {' '.join(seen.get(s, [])) or '(nothing)'}")
EOF
