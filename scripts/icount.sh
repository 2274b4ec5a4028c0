#!/usr/bin/env bash
# Instructions per operation of the engine's hot paths, counted by callgrind (stable from run
# to run, unlike times). Each figure is (instructions with N operations - instructions with
# 0) / N, from the loop examples in crates/scalevfs/examples.
#
# Usage: bash scripts/icount.sh [--atomics] [ROOT]    (ROOT: a checkout, default this one)
# Prints one "name instructions" line per operation. With --atomics, a third column: the
# atomic read-modify-writes per operation (scripts/atomics.py), each of which costs tens of
# cycles that callgrind counts as one instruction.
set -euo pipefail
atomics=0
if [ "${1:-}" = --atomics ]; then
    atomics=1
    shift
fi
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
target="${CARGO_TARGET_DIR:-$root/target}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v valgrind >/dev/null || { echo "icount.sh: valgrind not found" >&2; exit 1; }
(cd "$root" && cargo build --release -q -p scalevfs --examples)

total() { # "instructions rmws" of one run (rmws 0 without --atomics); args: callgrind options, then the program
    local out opts=()
    out=$(mktemp)
    [ "$atomics" = 1 ] && opts=(--dump-instr=yes)
    while [ "${1:-}" != -- ]; do
        opts+=("$1")
        shift
    done
    shift
    if ! valgrind --tool=callgrind "${opts[@]}" --callgrind-out-file="$out" "$@" >/dev/null 2>&1; then
        echo "icount.sh: $* failed under valgrind" >&2
        rm -f "$out"
        echo 0 0
        return
    fi
    local rmw=0
    if [ "$atomics" = 1 ]; then
        rmw=$(python3 "$here/atomics.py" "$out" "$1" | awk '$1 == "rmw" {print $2}')
    fi
    echo "$(awk '/^totals:/ {print $2}' "$out") $rmw"
    rm -f "$out"
}

# One line: name, per-operation instructions (and read-modify-writes) from two runs' totals
# and the operation count.
line() { # name, n, "a_ins a_rmw", "b_ins b_rmw"
    local name=$1 n=$2
    read -r ai ar <<<"$3"
    read -r bi br <<<"$4"
    if [ "$atomics" = 1 ]; then
        echo "$name $(( (ai - bi) / n )) $(awk -v a="$ar" -v b="$br" -v n="$n" 'BEGIN {printf "%.2f", (a - b) / n}')"
    else
        echo "$name $(( (ai - bi) / n ))"
    fi
}

per_op() { # name, n, example, args after the count
    local name=$1 n=$2 ex=$3
    shift 3
    line "$name" "$n" "$(total -- "$target/release/examples/$ex" "$n" "$@")" \
        "$(total -- "$target/release/examples/$ex" 0 "$@")"
}

per_op stat_cached 200000 stat_loop
per_op fstatat_dirfd 200000 stat_loop /wis/a/b/c/file at
per_op create_close_unlink 100000 create_unlink_loop
per_op rename 100000 rename_loop
# W3's longest path: 16 components of 40 bytes (656 bytes), answered by the path cache.
x37=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
long=$(for i in $(seq -w 0 14); do printf '/d%s%s' "$i" "$x37"; done; printf '/f%s%s' "$x37" xx)
per_op stat_long_656 100000 stat_loop "$long"
# W5-warm's loop on memfs: stats cycling over 1,024 files in 16 directories, and over 128.
per_op stat_tree_1024 100000 stat_tree 1024
per_op stat_tree_128 100000 stat_tree 128
# W7's loop: open, read 64 bytes, close, over 254 files in turn.
per_op open_read_close 100000 orc_loop
# W5's loop on one thread: stats over a host tree of 16,000 files through hostfs with its
# inode cache capped at half of it, so that every directory is loaded again (the miss path;
# host system calls are the kernel's and are not counted).
per_op cold_tree_hostfs 32000 cold_tree
# W4's phases on memfs, each counted inside its phase only (callgrind's --toggle-collect),
# per file, over 50,000 files (/w4/d<j>/f<k>, a thousand to a directory): create_cold,
# each created and closed (with its directory's mkdir); walk_stat_cold, a stat of each
# path, seen once, so the path cache cannot answer it (the cold walk);
# readdir_fstatat_cold, each directory listed (getdents) and each entry fstatat'ed under
# the directory's descriptor; remove_cold, each unlinked (with its directory's rmdir,
# which drops the negative entries the unlinks left).
phase() { # name, function
    line "$1" 50000 "$(total --toggle-collect="fstree::$2" -- \
        "$target/release/examples/fstree" 50 1000)" "0 0"
}
phase create_cold phase_create
phase walk_stat_cold phase_stat
phase readdir_fstatat_cold phase_readdir
phase remove_cold phase_remove
