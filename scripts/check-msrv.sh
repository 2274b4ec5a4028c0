#!/usr/bin/env bash
# Checks that every crate's rust-version is true of what a fresh `cargo install` or `cargo build`
# without --locked would compile: resolves the workspace afresh (ignoring Cargo.lock, as
# `cargo install --path` does), then requires every normal and build dependency of each member,
# on Linux with default features, to declare a rust-version no newer than the member's.
#
# Then it compiles each member with its declared rust-version's toolchain, where rustup can
# install one (clippy's incompatible_msrv lint covers the project's own use of std's APIs,
# not what changed under them, nor dependencies that declare too old a rust-version). Dev-dependencies are not checked:
# they build tests and benchmarks, not what a user installs or links.
#
# Usage: bash scripts/check-msrv.sh. Needs crates.io; says so and stops (status 0) without it.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The tracked files as they are in the work tree, plus the resolver configuration.
git ls-files -z | tar --null -cf - -T - | tar -xf - -C "$tmp"
rm -f "$tmp/Cargo.lock"
if ! (cd "$tmp" && cargo generate-lockfile -q) 2>"$tmp/.err"; then
    if grep -qiE "network|failed to (download|query|fetch)|could not resolve host|timed out" "$tmp/.err"; then
        echo "check-msrv: crates.io not reachable; not checked" >&2
        exit 0
    fi
    cat "$tmp/.err" >&2
    exit 1
fi
cat >"$tmp/check.py" <<'PY'
import json, sys

def version(v):
    parts = [int(x) for x in v.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))

m = json.load(sys.stdin)
packages = {p["id"]: p for p in m["packages"]}
nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
failed = False
for member in m["workspace_members"]:
    own = packages[member]
    name, declared = own["name"], own.get("rust_version")
    if not declared:
        print(f"{name}: no rust-version")
        failed = True
        continue
    seen, todo, newer = set(), [member], []
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if not kinds & {None, "build"} or dep["pkg"] in seen:
                continue
            seen.add(dep["pkg"])
            todo.append(dep["pkg"])
            p = packages[dep["pkg"]]
            needs = p.get("rust_version")
            if needs and version(needs) > version(declared):
                newer.append(f"{p['name']} {p['version']} needs {needs}")
    print(f"{name} (rust-version {declared}): {len(seen)} dependencies, {'FAILS' if newer else 'ok'}")
    for n in newer:
        print(f"    {n}")
    failed |= bool(newer)
sys.exit(1 if failed else 0)
PY
(cd "$tmp" && cargo metadata -q --format-version 1 --filter-platform x86_64-unknown-linux-gnu) |
    python3 "$tmp/check.py"

# Then each member compiled with the toolchain of the rust-version it declares, where rustup
# can install it, against the same fresh resolution: what the metadata cannot show is the
# project's own code on an older std (an intrinsic that became safe to call in 1.86 was
# refused by 1.80), or a dependency whose declared rust-version is wrong (`ignore` 0.4.30
# declares an older one but needs 1.88). Libraries and binaries only, as a user builds them.
# Skipped, and said, for a toolchain that cannot be installed.
(cd "$tmp" && cargo metadata -q --no-deps --format-version 1) |
    python3 -c 'import json,sys
for p in json.load(sys.stdin)["packages"]:
    print(p["rust_version"], p["name"])' | sort >"$tmp/members"
for v in $(cut -d" " -f1 "$tmp/members" | uniq); do
    pkgs=$(awk -v v="$v" '$1 == v {printf " -p %s", $2}' "$tmp/members")
    if command -v rustup >/dev/null &&
        timeout 600 rustup toolchain install "$v" --profile minimal >/dev/null 2>&1; then
        # shellcheck disable=SC2086 # one word per option
        (cd "$tmp" && CARGO_TARGET_DIR="$tmp/target-$v" rustup run "$v" cargo check -q $pkgs)
        echo "compiled with Rust $v:$pkgs"
    else
        echo "check-msrv: Rust $v could not be installed; not compiled with it:$pkgs" >&2
    fi
done
