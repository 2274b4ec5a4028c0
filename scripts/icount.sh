#!/usr/bin/env bash
# Instructions per operation of the engine's hot paths, counted by callgrind (stable from run
# to run, unlike times). Each figure is (instructions with N operations - instructions with
# 0) / N, from the loop examples in crates/scalevfs/examples.
#
# Usage: bash scripts/icount.sh [ROOT]    (ROOT: a checkout to measure, default this one)
# Prints one "name instructions" line per operation.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
target="${CARGO_TARGET_DIR:-$root/target}"
command -v valgrind >/dev/null || { echo "icount.sh: valgrind not found" >&2; exit 1; }
(cd "$root" && cargo build --release -q -p scalevfs --examples)

total() { # instructions of one run
    local out
    out=$(mktemp)
    if ! valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >/dev/null 2>&1; then
        echo "icount.sh: $* failed under valgrind" >&2
        rm -f "$out"
        echo 0
        return
    fi
    awk '/^totals:/ {print $2}' "$out"
    rm -f "$out"
}

per_op() { # name, n, example, args after the count
    local name=$1 n=$2 ex=$3
    shift 3
    local a b
    a=$(total "$target/release/examples/$ex" "$n" "$@")
    b=$(total "$target/release/examples/$ex" 0 "$@")
    echo "$name $(( (a - b) / n ))"
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
    local out
    out=$(mktemp)
    if valgrind --tool=callgrind --toggle-collect="fstree::$2" --callgrind-out-file="$out" \
        "$target/release/examples/fstree" 50 1000 >/dev/null 2>&1; then
        echo "$1 $(( $(awk '/^totals:/ {print $2}' "$out") / 50000 ))"
    else
        echo "icount.sh: fstree failed under valgrind" >&2
        echo "$1 0"
    fi
    rm -f "$out"
}
phase create_cold phase_create
phase walk_stat_cold phase_stat
phase readdir_fstatat_cold phase_readdir
phase remove_cold phase_remove
