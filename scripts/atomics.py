#!/usr/bin/env python3
"""Atomic read-modify-writes executed, from a callgrind profile taken with --dump-instr=yes.

Usage: atomics.py PROFILE BINARY [--by-function]

An atomic read-modify-write (a `lock`-prefixed instruction, or `xchg` with a memory
operand, which is locked without the prefix) costs tens of cycles even on a line the core
already owns, where an ordinary instruction costs a fraction of one: callgrind counts them
as one instruction each, so `scripts/icount.sh` does not show what they cost. This reads
the executions of every instruction of BINARY from the profile, finds the locked ones in
`objdump -d BINARY`, and prints their total (and, with --by-function, the functions that
executed them). `lock or $0,(%rsp)`-style instructions (full fences that write nothing)
are counted apart, as fences. Only BINARY's own code is counted: the engine and its
statically linked allocator, not the C library.
"""
import collections
import re
import subprocess
import sys


def executions(profile, binary):
    """Executions per instruction address of `binary`'s code in a callgrind profile."""
    obs = {}
    cur = None
    counts = collections.Counter()
    last = 0
    after_calls = False
    with open(profile) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line:
                continue
            head = line[0]
            if head.isalpha():
                m = re.match(r"(c?ob)=\((\d+)\)(?: (.*))?$", line)
                if m:
                    if m.group(3):
                        obs[m.group(2)] = m.group(3)
                    if m.group(1) == "ob":
                        cur = obs.get(m.group(2))
                elif line.startswith("calls="):
                    after_calls = True
                continue
            if head not in "0123456789+-*":
                continue
            fields = line.split()
            pos = fields[0]
            if pos.startswith("0x"):
                last = int(pos, 16)
            elif pos[0] in "+-":
                n = pos[1:]
                step = int(n, 16) if n.startswith("0x") else int(n)
                last = last + step if pos[0] == "+" else last - step
            elif pos != "*":
                last = int(pos)
            if after_calls:
                # The cost of a call made from this instruction, not its own.
                after_calls = False
                continue
            if cur == binary and len(fields) >= 3:
                counts[last] += int(fields[2])
    return counts


LOCKED = re.compile(r"^\s*([0-9a-f]+):\s+(lock\s+\S+|xchg\s+\S+)\s*(.*)$")
SYMBOL = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def locked_instructions(binary):
    """Address -> (kind, function) of every locked instruction in `binary`."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", binary],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = {}
    func = "?"
    for line in out.splitlines():
        m = SYMBOL.match(line)
        if m:
            func = m.group(1)
            continue
        m = LOCKED.match(line)
        if not m:
            continue
        insn, operands = m.group(2), m.group(3)
        if insn.startswith("xchg") and "(" not in operands:
            continue  # register to register: not atomic
        fence = re.match(r"lock\s+or[lq]?$", insn) and operands.startswith("$0x0,")
        found[int(m.group(1), 16)] = ("fence" if fence else "rmw", func)
    return found


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    by_function = "--by-function" in sys.argv
    if len(args) != 2:
        sys.exit(__doc__)
    profile, binary = args
    counts = executions(profile, binary)
    locked = locked_instructions(binary)
    total = collections.Counter()
    per_function = collections.Counter()
    for addr, (kind, func) in locked.items():
        n = counts.get(addr, 0)
        total[kind] += n
        if kind == "rmw" and n:
            per_function[func] += n
    print(f"rmw {total['rmw']}")
    print(f"fence {total['fence']}")
    if by_function:
        for func, n in per_function.most_common(25):
            print(f"  {n:>12}  {func[:150]}")


if __name__ == "__main__":
    main()
