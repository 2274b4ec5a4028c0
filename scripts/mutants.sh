#!/usr/bin/env bash
# Mutation testing of the engine's concurrency-critical modules with cargo-mutants: each
# mutant (an operator flipped, a body replaced by a default value, ...) is built and the
# tests run against it; a mutant the tests do not catch "survives". Not part of CI (hours
# on two cores); the figures are in BENCHMARKS.md and the survivors judged equivalent are
# listed in docs/mutants.md.
#
# Usage: bash scripts/mutants.sh [FILE...]   (default: walk, dentry, pathcache, sync, file)
# Pass 1 runs the unit, smoke, semantic, stress, race, plan, memory and space tests; pass 2 runs the loom
# models against what pass 1 left alive in sync.rs (the protocols they model).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(walk dentry pathcache sync file)
fi
args=()
for f in "${files[@]}"; do
    args+=(-f "crates/scalevfs/src/$f.rs")
done
out="${MUTANTS_OUT:-target/mutants}"
SCALEVFS_RACE_SECS="${SCALEVFS_RACE_SECS:-0.3}" PROPTEST_CASES="${PROPTEST_CASES:-32}" \
    cargo mutants -p scalevfs "${args[@]}" --profile mutants --output "$out" \
    --minimum-test-timeout 120 -- \
    --lib --test smoke --test semantics --test stress --test races --test plans \
    --test memory --test space || true
echo "pass 1: $(cat "$out/mutants.out/caught.txt" | wc -l) caught," \
    "$(cat "$out/mutants.out/missed.txt" | wc -l) missed," \
    "$(cat "$out/mutants.out/timeout.txt" | wc -l) timeouts," \
    "$(cat "$out/mutants.out/unviable.txt" | wc -l) unviable"
# Pass 2: the loom models, on the survivors of pass 1 only (--iterate skips what pass 1
# caught or found unviable). Code outside cfg(loom) is not built here, so its survivors
# survive again: only protocol code the models exercise can be caught in this pass.
RUSTFLAGS="--cfg loom --cfg crossbeam_loom" \
    cargo mutants -p scalevfs "${args[@]}" --profile mutants --output "$out" --iterate \
    --minimum-test-timeout 300 -- --lib loom || true
echo "after pass 2: $(cat "$out/mutants.out/caught.txt" | wc -l) caught," \
    "$(cat "$out/mutants.out/missed.txt" | wc -l) missed," \
    "$(cat "$out/mutants.out/timeout.txt" | wc -l) timeouts," \
    "$(cat "$out/mutants.out/unviable.txt" | wc -l) unviable"
