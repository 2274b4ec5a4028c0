#!/usr/bin/env bash
# A long campaign of the random differential plans (crates/scalevfs/tests/plans.rs, the
# kernel's tmpfs as the oracle) over every backend configuration that test.sh runs them on.
# CI runs 2,000 plans per configuration with a fresh seed each time, so a difference that
# one plan in 50,000 draws fails CI now and then; this looks for such differences on
# purpose. Each round is PROPTEST_CASES plans (20,000 by default) with a fresh seed; ROUNDS
# rounds (5 by default) per configuration. The first failure of a configuration stops it,
# and its whole output (the shrunk plan and both traces) is kept in
# target/plans-campaign/<configuration>.log. A round that runs past ROUND_SECS (1,800 by
# default) is stopped and counted as a failure: a plan that never ends is a hang, and the
# last "plan:" line of its log (SCALEVFS_PLAN_TRACE prints each plan before it runs) is it.
# Usage: bash scripts/plans-campaign.sh        (about 25 min with the defaults on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-5}"
export PROPTEST_CASES="${PROPTEST_CASES:-20000}"
out=target/plans-campaign
mkdir -p "$out"
cargo test --release -q -p scalevfs --test plans --no-run
failed=0
while read -r name env; do
    for i in $(seq "$rounds"); do
        log="$out/$name.log"
        # shellcheck disable=SC2086 # $env is a list of assignments, split on purpose
        if timeout "${ROUND_SECS:-1800}" env $env SCALEVFS_PLAN_TRACE=1 cargo test --release \
            -q -p scalevfs --test plans random -- --nocapture >"$log" 2>&1; then
            echo "plans-campaign: $name: round $i of $rounds, $PROPTEST_CASES plans, no difference"
        else
            echo "plans-campaign: $name: round $i failed or hung; what it printed is in $log"
            failed=1
            break
        fi
    done
done <<'EOF'
memfs SCALEVFS_TEST_BACKEND=memfs
hostfs SCALEVFS_TEST_BACKEND=host
hostfs-cache3 SCALEVFS_TEST_BACKEND=host SCALEVFS_TEST_HOST_CACHE=3
hostfs-ttl0 SCALEVFS_TEST_BACKEND=host SCALEVFS_TEST_HOST_TTL_MS=0
hostfs-ttl0-cache3 SCALEVFS_TEST_BACKEND=host SCALEVFS_TEST_HOST_TTL_MS=0 SCALEVFS_TEST_HOST_CACHE=3
EOF
exit "$failed"
