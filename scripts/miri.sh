#!/usr/bin/env bash
# Miri with Tree Borrows on the engine's unit tests (among them a two-thread test of the
# dentry hash). Installs the nightly toolchain's miri and rust-src components if rustup can.
#
# Flags, and why:
# - -Zmiri-tree-borrows: the aliasing model the engine is written against (a dentry is freed
#   only through its allocation's own pointer; see crates/scalevfs/src/dentry.rs).
# - -Zmiri-permissive-provenance: crossbeam-epoch 0.9 keeps tagged pointers as integers and
#   casts them back (int-to-pointer casts), which strict provenance rejects.
# - -Zmiri-ignore-leaks: crossbeam-epoch's global collector and its per-thread handles are
#   never freed at exit, by design.
# - -Zmiri-disable-isolation: the engine reads the real-time clock for timestamps.
#
# Under Miri the engine's locks are std's (crates/scalevfs/src/sync.rs, `miri_locks`):
# parking_lot_core 0.9 sleeps with a futex call whose argument types nightlies since
# rust-lang/rust#161734 reject as undefined behaviour in that dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1 ||
        rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 || true
fi
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri.sh: SKIPPED: cargo +nightly miri is not available and rustup could not" \
        "install it (no access to the Rust distribution server?)" >&2
    exit 0
fi
export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks -Zmiri-disable-isolation"
cargo +nightly miri test -p scalevfs --lib
