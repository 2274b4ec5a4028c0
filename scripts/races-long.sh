#!/usr/bin/env bash
# The race tests of issue 8 (crates/scalevfs/tests/races.rs), one at a time, for
# SCALEVFS_RACE_SECS each (60 by default; CI runs them for 2 s, in parallel), and the stress
# suite, and the escape races (SCALEVFS_ESCAPE_ROUNDS resolutions per resolver of the
# scalevfs-hostfs crate, and through the engine's hostfs; 400,000 by default; CI runs
# 20,000). Part of the benchmark run (see BENCHMARKS.md): windows of a few instructions need
# minutes to be hit on two cores. Usage: bash scripts/races-long.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export SCALEVFS_RACE_SECS="${SCALEVFS_RACE_SECS:-60}"
cargo test --release -p scalevfs --test races -- --test-threads=1
cargo test --release -p scalevfs --test stress
SCALEVFS_ESCAPE_ROUNDS="${SCALEVFS_ESCAPE_ROUNDS:-400000}" \
    cargo test --release -p scalevfs-hostfs --test confine no_escape -- --nocapture
SCALEVFS_ESCAPE_ROUNDS="${SCALEVFS_ESCAPE_ROUNDS:-400000}" \
    cargo test --release -p scalevfs --test hostfs no_escape -- --nocapture
