#!/usr/bin/env bash
# Which cache lines two threads pass between them, without hardware counters: runs the
# `conflict_audit` example (two threads taking turns) under valgrind's lackey, which traces
# every memory access, and reports the lines one thread's turn writes and the other's next
# turn touches, with the code that touched them (see BENCHMARKS.md, "Which lines the
# threads share"). A line in that list moves between CPUs at every turn.
#
# Usage: bash scripts/conflict-audit.sh CASE [WINDOW] [ROUNDS]
#   CASE: w7-private | w7-shared | w8-private | w9-private | w5 (see crates/scalevfs/examples/conflict_audit.rs);
#   WINDOW: operations per turn (default 1; 256 for w5); ROUNDS: turns each (default 6).
# Needs valgrind, python3 and addr2line (binutils). w5 traces 32,000 stats of warm-up too:
# about 6 minutes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case="${1:?usage: conflict-audit.sh w7-private|w7-shared|w8-private|w9-private|w5 [WINDOW] [ROUNDS]}"
window="${2:-$([ "$case" = w5 ] && echo 256 || echo 1)}"
rounds="${3:-6}"
for tool in valgrind python3 addr2line; do
    command -v "$tool" >/dev/null || { echo "conflict-audit.sh: $tool not found" >&2; exit 1; }
done
(cd "$root" && cargo build --release -q -p scalevfs --example conflict_audit)
bin="$target/release/examples/conflict_audit"
# Valgrind maps a position-independent executable at 0x108000 on amd64: the marker's
# address is that plus its offset in the binary (checked against what the program prints).
base=0x108000
off=$(nm -C "$bin" | awk '/ conflict_audit::MARK$/ {print $1}')
[ -n "$off" ] || { echo "conflict-audit.sh: no conflict_audit::MARK in $bin" >&2; exit 1; }
mark=$(printf "%08x" $((base + 0x$off)))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Only the trace from the first access to the marker on is kept (not the warm-up's).
valgrind --tool=lackey --trace-mem=yes --log-fd=3 "$bin" "$case" "$window" "$rounds" \
    3>&1 1>"$tmp/out" | awk -v m="$mark" 'f || index($0, m) {f = 1; print}' >"$tmp/trace"
printed=$(awk '/^MARK/ {print $2}' "$tmp/out")
if [ "$((0x$printed))" != "$((0x$mark))" ]; then
    echo "conflict-audit.sh: the marker is at $printed, not at $mark: valgrind loaded the binary elsewhere" >&2
    exit 1
fi
python3 "$root/scripts/conflict-audit.py" "$tmp/trace" "$mark" "$bin" "$base"
