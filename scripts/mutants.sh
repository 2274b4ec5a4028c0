#!/usr/bin/env bash
# Mutation testing of the engine's concurrency-critical modules with cargo-mutants: each
# mutant (an operator flipped, a body replaced by a default value, ...) is built and the
# tests run against it; a mutant the tests do not catch "survives". Not part of CI (hours
# on two cores); the figures are in BENCHMARKS.md and the survivors judged equivalent are
# listed in docs/mutants.md.
#
# Usage: bash scripts/mutants.sh [FILE...]   (default: pathcache, sync, walk, dentry, file)
# Each file is its own run, with its results in $MUTANTS_OUT/<file> (default
# target/mutants); a file whose run finished is skipped, so an interrupted run resumes
# where it stopped (delete the directory to test a file again).
# Pass 1 runs the unit, smoke, semantic, stress, race, plan, memory and space tests; pass 2
# runs the loom models against what pass 1 left alive (the protocols they model live in
# sync.rs, file.rs, pathcache.rs and dentry.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(pathcache sync walk dentry file)
fi
root="${MUTANTS_OUT:-target/mutants}"
count() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
for f in "${files[@]}"; do
    out="$root/$f"
    if [ -f "$out/finished" ]; then
        echo "$f: done before"
    else
        rm -rf "$out"
        mkdir -p "$out"
        SCALEVFS_RACE_SECS="${SCALEVFS_RACE_SECS:-0.3}" PROPTEST_CASES="${PROPTEST_CASES:-32}" \
            cargo mutants -p scalevfs -f "crates/scalevfs/src/$f.rs" --profile mutants \
            --output "$out" --minimum-test-timeout 120 -- \
            --lib --test smoke --test semantics --test stress --test races --test plans \
            --test memory --test space || true
        # Pass 2: the loom models, on the survivors of pass 1 (--iterate skips what pass
        # 1 caught or found unviable). Code outside cfg(loom) is not built there, so its
        # survivors survive again. Pass 2 can only move a mutant from missed to caught.
        cp -r "$out/mutants.out" "$out/pass1"
        if [ "$(count "$out/pass1/missed.txt")" -gt 0 ]; then
            RUSTFLAGS="--cfg loom --cfg crossbeam_loom" \
                cargo mutants -p scalevfs -f "crates/scalevfs/src/$f.rs" --profile mutants \
                --output "$out" --iterate --minimum-test-timeout 300 -- --lib loom || true
            touch "$out/mutants.out/caught.txt"
            sort "$out/pass1/missed.txt" >"$out/p1missed"
            sort "$out/mutants.out/caught.txt" >"$out/p2caught"
            comm -12 "$out/p1missed" "$out/p2caught" >"$out/loom-caught.txt"
            comm -23 "$out/p1missed" "$out/p2caught" >"$out/missed.txt"
        else
            : >"$out/loom-caught.txt"
            : >"$out/missed.txt"
        fi
        touch "$out/finished"
    fi
    p="$out/pass1"
    echo "$f: $(count "$p/caught.txt") caught by the tests, $(count "$out/loom-caught.txt")" \
        "more by the loom models, $(count "$out/missed.txt") missed," \
        "$(count "$p/timeout.txt") timeouts, $(count "$p/unviable.txt") unviable"
done
