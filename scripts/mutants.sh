#!/usr/bin/env bash
# Mutation testing of the engine's concurrency-critical modules with cargo-mutants: each
# mutant (an operator flipped, a body replaced by a default value, ...) is built and the
# tests run against it; a mutant the tests do not catch "survives". Not part of CI (hours
# on two cores); the figures are in BENCHMARKS.md and the survivors judged equivalent are
# listed in docs/mutants.md.
#
# Usage: bash scripts/mutants.sh [FILE...]   (default: pathcache, sync, walk, dentry, file)
#        bash scripts/mutants.sh --report     (the figures so far, nothing run)
# Each file is split into SHARDS shards (default 4), each its own cargo-mutants run with its
# results in $MUTANTS_OUT/<file>/<k> (default target/mutants). A shard that finished on the
# file's current text is skipped, so an interrupted run resumes at the next shard; a shard
# done on an older text of the file runs again. Code in `mod tests` (names with " tests::") is not mutated.
# Pass 1 runs the unit, smoke, semantic, stress, race, plan, memory, space, hostfs and lock
# tests (hostfs's own tests: `file.rs` holds its open files' host descriptors; the lock
# tests since 2026-11-25: `sync::Condvar` and `file.rs`'s lock flags serve them); pass 2
# runs the loom models against what pass 1 left alive (the protocols they model live in
# sync.rs, file.rs, pathcache.rs, dentry.rs, walk.rs and mount.rs); a shard's `loom-ok` says
# its pass 2 ran.
# A mutant whose tests hang past the timeout (TIMEOUT_SECS, default 60; the suite takes
# about 6 s on a quiet machine, 25-55 s beside a build) counts as caught, and is reported
# separately. Pass 2's timeout (LOOM_TIMEOUT_SECS, default 900) covers the whole loom suite,
# about 75 s alone and over 300 s beside a build. A shard whose pass 1 finished keeps it:
# a rerun after a failed pass 2 runs pass 2 only.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${MUTANTS_OUT:-target/mutants}"
shards="${SHARDS:-4}"
count() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

report() {
    local f=$1 dir caught=0 loom=0 missed=0 timeout=0 unviable=0 done=0
    for dir in "$root/$f"/*/; do
        [ -f "$dir/finished" ] || continue
        done=$((done + 1))
        caught=$((caught + $(count "$dir/pass1/caught.txt")))
        loom=$((loom + $(count "$dir/loom-caught.txt")))
        missed=$((missed + $(count "$dir/missed.txt")))
        timeout=$((timeout + $(count "$dir/pass1/timeout.txt")))
        unviable=$((unviable + $(count "$dir/pass1/unviable.txt")))
    done
    local viable=$((caught + loom + missed + timeout))
    local pct="-"
    [ "$viable" -gt 0 ] && pct="$(((caught + loom + timeout) * 1000 / viable))"
    [ "$pct" != "-" ] && pct="$((pct / 10)).$((pct % 10))%"
    echo "$f: $done/$shards shards; $caught caught by the tests, $loom more by the loom" \
        "models, $timeout timeouts, $missed missed, $unviable unviable: $pct of viable caught"
}

# Pass 2: the loom models, on exactly the mutants pass 1 missed (chosen by name). Code
# outside cfg(loom) is not built there, so its survivors survive again. Pass 2 can only move
# a mutant from missed to caught. Only the lib is built (`--cargo-arg=--lib`): the models
# live there, and the test files need not build under loom. A loom build that fails (cargo-mutants exit 4: the
# unmutated tree did not build) is an error, not a result: the shard is left without
# `loom-ok`, and the next run does pass 2 again.
pass2() {
    local out=$1 src=$2 rc=0
    rm -rf "$out/loom" "$out/loom-ok"
    if [ "$(count "$out/pass1/missed.txt")" -gt 0 ]; then
        re=$(sed -e 's/[][\.^$*+?(){}|]/\\&/g' -e 's/.*/^&$/' "$out/pass1/missed.txt" |
            paste -sd'|')
        RUSTFLAGS="--cfg loom --cfg crossbeam_loom" CARGO_TARGET_DIR="$tree/target/loom" \
            cargo mutants -p scalevfs -f "$src" --re "$re" --profile checked --in-place \
            --dir "$tree" --output "$out/loom" --timeout "${LOOM_TIMEOUT_SECS:-900}" \
            --cargo-arg=--lib -- loom ||
            rc=$?
        case $rc in
        0 | 2 | 3) ;;
        *)
            echo "mutants.sh: the loom pass failed on $out (exit $rc); see $out/loom" >&2
            exit 1
            ;;
        esac
        touch "$out/loom/mutants.out/caught.txt" "$out/loom/mutants.out/timeout.txt"
        sort "$out/pass1/missed.txt" >"$out/p1missed"
        sort "$out/loom/mutants.out/caught.txt" "$out/loom/mutants.out/timeout.txt" \
            >"$out/p2caught"
        comm -12 "$out/p1missed" "$out/p2caught" >"$out/loom-caught.txt"
        comm -23 "$out/p1missed" "$out/p2caught" >"$out/missed.txt"
    else
        : >"$out/loom-caught.txt"
        : >"$out/missed.txt"
    fi
    touch "$out/loom-ok"
}

files=()
only_report=false
for a in "$@"; do
    if [ "$a" = --report ]; then only_report=true; else files+=("$a"); fi
done
if [ ${#files[@]} -eq 0 ]; then
    files=(pathcache sync walk dentry file)
fi
if $only_report; then
    for f in "${files[@]}"; do report "$f"; done
    exit 0
fi
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked

# The mutants are made in a worktree of HEAD kept in $root/tree (cargo-mutants --in-place),
# whose target directory persists: a shard's baseline is an incremental build, not a fresh
# one (about 3 min saved per shard on this machine). What is tested is the last commit.
tree="$root/tree"
if [ ! -d "$tree/.git" ] && [ ! -f "$tree/.git" ]; then
    mkdir -p "$root"
    git worktree add --detach "$tree" HEAD >/dev/null
fi
# A run killed mid-mutant leaves the mutated file behind: reset, then move to HEAD.
git -C "$tree" reset -q --hard
git -C "$tree" checkout -q --detach "$(git rev-parse HEAD)"
root=$(cd "$root" && pwd)

for f in "${files[@]}"; do
    src="crates/scalevfs/src/$f.rs"
    sum=$(sha256sum "$tree/$src" | cut -d' ' -f1)
    for k in $(seq 0 $((shards - 1))); do
        out="$root/$f/$k"
        if [ -f "$out/finished" ] && [ "$(cat "$out/source.sha")" = "$sum" ]; then
            # Done; redo only a loom pass that did not run (see `pass2`).
            [ -f "$out/loom-ok" ] || pass2 "$out" "$src"
            continue
        fi
        if [ -d "$out/pass1" ] && [ "$(cat "$out/source.sha" 2>/dev/null)" = "$sum" ]; then
            # Pass 1 finished on this text and pass 2 did not: only pass 2 again.
            pass2 "$out" "$src"
            touch "$out/finished"
            continue
        fi
        rm -rf "$out"
        mkdir -p "$out"
        echo "$sum" >"$out/source.sha"
        common=(-p scalevfs -f "$src" --exclude-re ' tests::' --shard "$k/$shards"
            --profile checked --in-place --dir "$tree" --output "$out")
        # cargo-mutants exits 0 (all caught), 2 (some missed) or 3 (some timed out); any
        # other code (4: the unmutated tree failed) means no result, and the shard is not
        # marked finished.
        # A run killed mid-build can leave a corrupt artifact behind that cargo still calls
        # fresh (the baseline then fails to link): clean the engine's artifacts and try once
        # more.
        for attempt in 1 2; do
            rc=0
            SCALEVFS_RACE_SECS="${SCALEVFS_RACE_SECS:-0.3}" PROPTEST_CASES="${PROPTEST_CASES:-32}" \
                cargo mutants "${common[@]}" --timeout "${TIMEOUT_SECS:-60}" -- \
                --lib --test smoke --test semantics --test stress --test races --test plans \
                --test memory --test space --test hostfs --test locks || rc=$?
            [ "$rc" = 4 ] && [ "$attempt" = 1 ] || break
            echo "mutants.sh: the unmutated tree failed; cleaning its build and trying again" >&2
            (cd "$tree" && cargo clean -q -p scalevfs --profile checked)
        done
        case $rc in
        0 | 2 | 3) ;;
        *)
            echo "mutants.sh: cargo mutants failed on $f shard $k (exit $rc); see $out" >&2
            exit 1
            ;;
        esac
        cp -r "$out/mutants.out" "$out/pass1"
        pass2 "$out" "$src"
        touch "$out/finished"
    done
    report "$f"
done
