#!/usr/bin/env bash
# Runs everything CI runs: format and lint checks, the unit, integration, differential
# (host tmpfs as oracle; needs root), race and stress tests (in release, then again with
# overflow checks and debug assertions in the `checked` profile), the loom models, Miri on the
# engine's unit tests, conformance through the FUSE mount (pjdfstest, fsx; needs root and
# /dev/fuse), the criterion micro-benchmarks run once each, and a quick benchmark run (with
# its JSON and plot) to keep `scalevfs bench` working, and the instruction-count guard of the
# hot paths (scripts/perf-guard.sh). Usage: bash scripts/test.sh
#
# Environment: CARGO_TARGET_DIR is honoured; SCALEVFS_RACE_SECS sets how long each race
# test of crates/scalevfs/tests/races.rs runs (2 s by default).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Each stage's heading gives the time since the start, so a slow stage shows in CI's log.
stage() { echo "== [$((SECONDS / 60)) min $((SECONDS % 60)) s] $*"; }

stage "fmt"
cargo fmt --all -- --check
stage "clippy"
cargo clippy --all-targets -- -D warnings
stage "tests (release)"
PROPTEST_CASES="${PROPTEST_CASES:-2000}" cargo test --release --workspace
stage "tests with overflow checks and debug assertions (profile checked; release wraps silently)"
PROPTEST_CASES="${PROPTEST_CASES:-256}" cargo test --profile checked --workspace --tests
stage "the CLI without its benchmark peers (cargo install --no-default-features)"
cargo test --release -p scalevfs-cli --no-default-features
stage "every rust-version holds for a fresh resolution (what cargo install without --locked builds)"
bash scripts/check-msrv.sh
stage "every crate packages and builds from its package (cargo package)"
# Cargo verifies each package against the others through a local registry. It takes a
# registry crate of one version to be the same forever, so a run after a change would build
# against the previous run's copy: unpacked once under $CARGO_HOME/registry/src/-<hash>/ (a
# registry without a host name) and compiled once in the debug profile. Remove both.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/scalevfs*-[0-9]*
rm -rf "$target"/debug/.fingerprint/scalevfs* "$target"/debug/deps/*scalevfs*
cargo package --workspace --allow-dirty
stage "a program written for std::fs, run on std::fs and on scalevfs::fs (only the import changed)"
cargo run --release -p scalevfs --example std_habits
stage "differential cases and plans on hostfs (writes through to a host tmpfs directory)"
SCALEVFS_TEST_BACKEND=host PROPTEST_CASES="${PROPTEST_CASES:-2000}" \
    cargo test --release -p scalevfs --test semantics --test plans
stage "the same with a cache of three objects (names swept and reloaded all the time)"
SCALEVFS_TEST_BACKEND=host SCALEVFS_TEST_HOST_CACHE=3 PROPTEST_CASES="${PROPTEST_CASES:-2000}" \
    cargo test --release -p scalevfs --test semantics --test plans
stage "the same under the shared policy with a TTL of zero (every use revalidated)"
SCALEVFS_TEST_BACKEND=host SCALEVFS_TEST_HOST_TTL_MS=0 PROPTEST_CASES="${PROPTEST_CASES:-2000}" \
    cargo test --release -p scalevfs --test semantics --test plans
stage "the same with a cache of three objects too (swept directories reconciled when loaded)"
SCALEVFS_TEST_BACKEND=host SCALEVFS_TEST_HOST_TTL_MS=0 SCALEVFS_TEST_HOST_CACHE=3 \
    PROPTEST_CASES="${PROPTEST_CASES:-2000}" cargo test --release -p scalevfs --test semantics --test plans
stage "loom models"
# crossbeam_loom puts crossbeam-epoch on loom too (see crates/scalevfs/Cargo.toml).
RUSTFLAGS="--cfg loom --cfg crossbeam_loom" CARGO_TARGET_DIR="$target/loom" \
    cargo test --release -p scalevfs --lib loom
stage "miri (Tree Borrows) on the engine's unit tests"
bash scripts/miri.sh
stage "conformance (pjdfstest, fsx, real programs through FUSE)"
bash scripts/conformance.sh
stage "micro-benchmarks, each run once"
cargo bench -p scalevfs --bench primitives -- --test
stage "perf guard (callgrind instruction counts against perf/icount-baseline.txt)"
bash scripts/perf-guard.sh
stage "bench --quick"
cargo run --release -p scalevfs-cli -- bench --quick --json "$target/bench-quick.json" \
    --plot "$target/bench-quick.svg"
stage "done"
