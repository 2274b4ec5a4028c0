#!/usr/bin/env bash
# A regression guard for the hot paths that is not a timed test: callgrind's instruction
# counts per operation (scripts/icount.sh; stable from run to run) against the figures
# recorded in perf/icount-baseline.txt. Fails when any rises more than PERF_GUARD_PCT
# percent (default 10) above its recorded figure; says so, without failing, when one falls
# by more (time to lower the baseline). Installs valgrind when it is missing (Debian).
#
# Usage: bash scripts/perf-guard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
pct="${PERF_GUARD_PCT:-10}"
base=perf/icount-baseline.txt
if ! command -v valgrind >/dev/null; then
    if command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq valgrind >/dev/null
    else
        echo "perf-guard.sh: valgrind not found and no apt-get to install it" >&2
        exit 1
    fi
fi
now=$(bash scripts/icount.sh)
# A path longer than 32 bytes is hashed with AES rounds where the CPU has AES-NI and AVX
# (name::path_hash_nul), a word at a time elsewhere: stat_long_656 has a line for each.
aes=0
if grep -qw aes /proc/cpuinfo && grep -qw avx /proc/cpuinfo; then aes=1; fi
fail=0
while read -r name want; do
    case "$name" in '#'* | '') continue ;; esac
    case "$name" in
    stat_long_656) [ "$aes" = 1 ] || continue ;;
    stat_long_656_words)
        [ "$aes" = 0 ] || continue
        name=stat_long_656
        ;;
    esac
    got=$(awk -v n="$name" '$1 == n {print $2}' <<<"$now")
    if [ -z "$got" ] || [ "$got" -le 0 ]; then
        # Zero is no measurement: the program did not run under valgrind (it crashed there
        # once, when rustix's vDSO reader met valgrind's auxiliary vector).
        echo "perf-guard: $name: not measured by scripts/icount.sh (got '${got}')" >&2
        fail=1
        continue
    fi
    limit=$((want * (100 + pct) / 100))
    floor=$((want * (100 - pct) / 100))
    if [ "$got" -gt "$limit" ]; then
        echo "perf-guard: $name: $got instructions, recorded $want: more than $pct% higher" >&2
        fail=1
    elif [ "$got" -lt "$floor" ]; then
        echo "perf-guard: $name: $got instructions, recorded $want: lower the baseline"
    else
        echo "perf-guard: $name: $got instructions (recorded $want)"
    fi
done <"$base"
exit "$fail"
