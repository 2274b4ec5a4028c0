#!/usr/bin/env bash
# Resource floods through the FUSE mount (issue 9), with the server's resident memory
# before and after, and the same floods on the host's tmpfs for scale:
#   1. one unprivileged process (uid 65534) holds N opens of one file; root must still
#      open, list and create;
#   2. root creates N empty files in one directory (timed), then removes them.
# Needs root and /dev/fuse. Usage: bash scripts/fuse-flood.sh [N [C]]   (N opens, default
# 1048576; C files, default N)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-1048576}"
C="${2:-$N}"
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
    # 1. nobody holds N opens of one file, in as many processes as its descriptor limit
    #    needs (uid 65534's files are all counted by the mount as one user's).
    PER=$(( $(ulimit -Hn) - 64 ))
    K=$(( (N + PER - 1) / PER ))
    rm -f "$W/go"
    HOLDERS=()
    for k in $(seq 0 $((K - 1))); do
        share=$(( k < K - 1 ? PER : N - PER * (K - 1) ))
        (
            ulimit -n "$(ulimit -Hn)"
            exec setpriv --reuid=65534 --regid=65534 --clear-groups "$PY" -c '
import os, sys, time
n, path, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
fds = []
try:
    for _ in range(n):
        fds.append(os.open(path, os.O_RDONLY))
except OSError as e:
    print(f"open {len(fds) + 1} failed: {e}", flush=True)
print(f"holds {len(fds)}", flush=True)
while not os.path.exists(go):
    time.sleep(0.2)
' "$share" "$dir/shared" "$W/go"
        ) >"$W/holder.$k" 2>&1 &
        HOLDERS+=($!)
    done
    t0=$SECONDS
    for k in $(seq 0 $((K - 1))); do
        until grep -q "holds" "$W/holder.$k" 2>/dev/null; do
            kill -0 "${HOLDERS[$k]}" 2>/dev/null || break
            sleep 0.2
        done
    done
    held=$(cat "$W"/holder.* | awk '/^holds/ {s += $2} END {print s}')
    echo "nobody: $K processes hold $held opens ($((SECONDS - t0)) s);" \
        "errors: $(cat "$W"/holder.* | grep -c failed || true)"
    cat "$W"/holder.* | grep failed | sort | uniq -c | head -3 || true
    echo "server RSS with nobody's opens held: $(rss)"
    cat "$dir/shared" >/dev/null && ls "$dir" >/dev/null && touch "$dir/root-touch" &&
        echo "root: cat, ls and touch work" || echo "root: LOCKED OUT"
    touch "$W/go"
    wait "${HOLDERS[@]}" || true
    rm -f "$W/go" "$W"/holder.* "$dir/root-touch"
    sleep 1
    echo "server RSS after nobody's close: $(rss)"
    # 2. root creates C files, then removes them.
    mkdir "$dir/many"
    "$PY" -c '
import os, sys, time
n, d = int(sys.argv[1]), sys.argv[2]
t = time.time()
for i in range(n):
    os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
print(f"root: created {n} files in {time.time() - t:.1f} s", flush=True)
' "$C" "$dir/many"
    echo "server RSS with $C files: $(rss)"
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
