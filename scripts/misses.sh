#!/usr/bin/env bash
# Cache misses per operation of the cold paths (W4's phases, W5's loop), from callgrind's
# cache model: deterministic from run to run, unlike times, and what instruction counts do
# not show when a workload's objects do not fit in a core's caches. The model's last level
# is set to one core's L2 on the development machine (2 MiB, 16 ways), so its misses stand
# for the loads that leave the core; the first level is the host's. Set MISSES_LL to model
# another last level ("SIZE,WAYS,LINE", as valgrind's --LL takes it).
#
# Usage: bash scripts/misses.sh [--where PHASE] [ROOT]
#   Prints, per operation: instructions, first-level read misses, last-level read misses and
#   last-level write misses, for W4's phases over 200 directories of 1,000 files (fstree:
#   create, stat, readdir, remove; each counted inside its phase only) and W5's loop (hostfs,
#   its inode cache capped, cold_tree: per stat, less the run with no stats).
#   --where PHASE: the 20 instructions that miss the last level most in that phase (create,
#   stat, readdir, remove or cold), each with its chain of inlined callers (needs python3
#   and addr2line).
set -euo pipefail
where=""
if [ "${1:-}" = "--where" ]; then
    where="$2"
    shift 2
fi
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
target="${CARGO_TARGET_DIR:-$root/target}"
ll="${MISSES_LL:-2097152,16,64}"
command -v valgrind >/dev/null || { echo "misses.sh: valgrind not found" >&2; exit 1; }
(cd "$root" && cargo build --release -q -p scalevfs --examples)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # out file, extra valgrind options, program and arguments
    local out=$1
    shift
    valgrind --tool=callgrind --cache-sim=yes --LL="$ll" --callgrind-out-file="$out" "$@" \
        >/dev/null 2>&1 || { echo "misses.sh: $* failed under valgrind" >&2; exit 1; }
}

# The totals line's events, in order: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
totals() { awk '/^totals:/ {print $2, $6, $9, $10}' "$1"; }

print() { # name, ops, totals (ir d1mr dlmr dlmw) [, totals to subtract]
    local name=$1 n=$2
    read -r ir d1 lr lw <<<"$3"
    if [ -n "${4:-}" ]; then
        read -r ir0 d10 lr0 lw0 <<<"$4"
        ir=$((ir - ir0)) d1=$((d1 - d10)) lr=$((lr - lr0)) lw=$((lw - lw0))
    fi
    awk -v n="$n" -v name="$name" -v ir="$ir" -v d1="$d1" -v lr="$lr" -v lw="$lw" 'BEGIN {
        printf "%-10s %8.0f %8.2f %8.2f %8.2f\n", name, ir / n, d1 / n, lr / n, lw / n }'
}

fstree="$target/release/examples/fstree"
cold="$target/release/examples/cold_tree"
if [ -n "$where" ]; then
    case "$where" in
        cold) run "$tmp/out" --dump-instr=yes "$cold" 64000; bin=$cold ;;
        create | stat | readdir | remove)
            run "$tmp/out" --dump-instr=yes --toggle-collect="fstree::phase_$where" \
                "$fstree" 200 1000
            bin=$fstree ;;
        *) echo "misses.sh: no phase $where" >&2; exit 2 ;;
    esac
    python3 - "$tmp/out" "$bin" <<'EOF'
import collections, subprocess, sys
path, binary = sys.argv[1], sys.argv[2]
misses, calls_next = collections.Counter(), False
addr = line = 0
idx = None
def pos(tok, cur):
    if tok == '*':
        return cur
    if tok[0] in '+-':
        return cur + int(tok, 0)
    return int(tok, 0)
for l in open(path):
    if l.startswith('events:'):
        idx = l.split()[1:].index('DLmr')
        continue
    if l.startswith('calls='):
        calls_next = True  # the next cost line is the call's inclusive cost
        continue
    if not l or not (l[0].isdigit() or l[0] in '+-*'):
        continue
    t = l.split()
    addr = pos(t[0], addr)
    if len(t) > 1:
        line = pos(t[1], line)
    if calls_next:
        calls_next = False
        continue
    if len(t) > 2 + idx:
        misses[addr] += int(t[2 + idx])
print(f"{'misses':>10}  instruction, innermost first")
for a, m in misses.most_common(20):
    out = subprocess.run(['addr2line', '-i', '-f', '-C', '-e', binary, hex(a)],
                         capture_output=True, text=True).stdout.split('\n')
    frames = [f"{out[i].split('::')[-1]}@{out[i + 1].rsplit('/', 1)[-1]}"
              for i in range(0, len(out) - 1, 2)]
    print(f"{m:>10,}  {' <- '.join(frames[:6])}")
EOF
    exit 0
fi

echo "per operation: instructions, L1 read misses, LL read misses, LL write misses (LL: $ll)"
for ph in create stat readdir remove; do
    run "$tmp/$ph" --toggle-collect="fstree::phase_$ph" "$fstree" 200 1000 &
done
wait
for ph in create stat readdir remove; do
    print "$ph" 200000 "$(totals "$tmp/$ph")"
done
run "$tmp/cold" "$cold" 64000 &
run "$tmp/cold0" "$cold" 0 &
wait
print cold 64000 "$(totals "$tmp/cold")" "$(totals "$tmp/cold0")"
