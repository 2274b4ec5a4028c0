#!/usr/bin/env bash
# Runs everything CI runs: format and lint checks, the unit, integration, differential
# (host tmpfs as oracle; needs root) and stress tests, the loom models, conformance
# through the FUSE mount (pjdfstest, fsx; needs root and /dev/fuse), the criterion
# micro-benchmarks run once each, and a quick benchmark run (with its JSON and plot) to keep
# `scalevfs bench` working. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== fmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --all-targets -- -D warnings
echo "== tests (release)"
PROPTEST_CASES="${PROPTEST_CASES:-2000}" cargo test --release --workspace
echo "== loom models"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p scalevfs --lib loom
echo "== conformance (pjdfstest, fsx, real programs through FUSE)"
bash scripts/conformance.sh
echo "== micro-benchmarks, each run once"
cargo bench -p scalevfs --bench primitives -- --test
echo "== bench --quick"
cargo run --release -p scalevfs-cli -- bench --quick --json target/bench-quick.json --plot target/bench-quick.svg
