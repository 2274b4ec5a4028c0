#!/usr/bin/env bash
# Resource floods through the FUSE mount (issue 9), with the server's resident memory
# before and after, and the same floods on the host's tmpfs for scale:
#   1. one unprivileged process (uid 65534) holds N opens of one file; root must still
#      open, list and create;
#   2. root creates N empty files in one directory (timed), then removes them.
# Needs root and /dev/fuse. Usage: bash scripts/fuse-flood.sh [N]   (default 1048576)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-1048576}"
TARGET="${CARGO_TARGET_DIR:-$(pwd)/target}"
cargo build --release -q -p scalevfs-cli
BIN="$TARGET/release/scalevfs"
# The system's Python (a per-user install may not be readable by uid 65534).
PY=/usr/bin/python3
[ -x "$PY" ] || { apt-get update -qq && apt-get install -y -qq python3; }
W=$(mktemp -d /tmp/scalevfs-flood.XXXXXX)
chmod 755 "$W"
M="$W/mnt"
T="$W/tmpfs"
mkdir -p "$M" "$T"
SRV=
cleanup() {
    if [ -n "$SRV" ]; then kill -TERM "$SRV" 2>/dev/null || true; wait "$SRV" 2>/dev/null || true; fi
    mountpoint -q "$M" && umount -l "$M" || true
    mountpoint -q "$T" && umount -l "$T" || true
    rm -rf "$W"
}
trap cleanup EXIT
"$BIN" mount "$M" --allow-other --notify-ready >"$W/ready" 2>"$W/err" &
SRV=$!
for _ in $(seq 100); do grep -q ready "$W/ready" 2>/dev/null && break; sleep 0.1; done
mount -t tmpfs tmpfs "$T"
rss() { awk '/VmRSS/ {print $2 / 1024 " MiB"}' "/proc/$SRV/status"; }

for dir in "$M" "$T"; do
    echo "== $dir"
    chmod 1777 "$dir"
    echo x >"$dir/shared"
    chmod 644 "$dir/shared"
    echo "server RSS at start: $(rss)"
    # 1. nobody holds N opens of one file, in one process (its descriptor limit raised).
    mkfifo "$W/go"
    (
        ulimit -n $((N + 64))
        exec setpriv --reuid=65534 --regid=65534 --clear-groups "$PY" -c '
import os, sys, time
n, path, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
fds = []
t = time.time()
try:
    for _ in range(n):
        fds.append(os.open(path, os.O_RDONLY))
except OSError as e:
    print(f"nobody: open {len(fds)} failed: {e}", flush=True)
print(f"nobody: holds {len(fds)} opens ({time.time() - t:.1f} s)", flush=True)
open(go).read()
' "$N" "$dir/shared" "$W/go"
    ) &
    HOLDER=$!
    for _ in $(seq 6000); do
        [ "$(ls /proc/$HOLDER/fd 2>/dev/null | wc -l)" -ge "$N" ] && break
        sleep 0.1
    done
    echo "server RSS with nobody's opens held: $(rss)"
    cat "$dir/shared" >/dev/null && ls "$dir" >/dev/null && touch "$dir/root-touch" &&
        echo "root: cat, ls and touch work" || echo "root: LOCKED OUT"
    echo >"$W/go"
    wait "$HOLDER"
    rm -f "$W/go" "$dir/root-touch"
    sleep 1
    echo "server RSS after nobody's close: $(rss)"
    # 2. root creates N files, then removes them.
    mkdir "$dir/many"
    "$PY" -c '
import os, sys, time
n, d = int(sys.argv[1]), sys.argv[2]
t = time.time()
for i in range(n):
    os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
print(f"root: created {n} files in {time.time() - t:.1f} s", flush=True)
' "$N" "$dir/many"
    echo "server RSS with $N files: $(rss)"
    "$PY" -c '
import shutil, sys, time
t = time.time()
shutil.rmtree(sys.argv[1])
print(f"root: removed them in {time.time() - t:.1f} s")
' "$dir/many"
    rm -f "$dir/shared"
    sleep 1
    echo "server RSS after removal: $(rss)"
done
