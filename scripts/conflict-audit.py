#!/usr/bin/env python3
"""Reads a valgrind lackey memory trace of `conflict_audit` (from its first marker store on)
and prints the cache lines that one thread's turn writes and the next turn (the other
thread's) touches, or that the next turn writes after this one read them: lines passed
between CPUs. Each is attributed to the code that touched it, through addr2line.

Usage: conflict-audit.py TRACE MARK_HEX BINARY LOAD_BASE_HEX"""
import collections
import subprocess
import sys


def turns(path, mark):
    """Per turn: {line: first ip that wrote it}, {line: first ip that touched it}."""
    out, cur, ip, stores = [], None, None, 0
    with open(path) as f:
        for text in f:
            if text[0] == "I":
                ip = int(text.split()[1].split(",")[0], 16)
                continue
            parts = text.split()
            if len(parts) != 2 or parts[0] not in ("L", "S", "M"):
                continue
            addr = int(parts[1].split(",")[0], 16)
            if addr == mark:
                if parts[0] == "L":
                    continue
                stores += 1
                cur = ({}, {}) if stores % 2 == 1 else None
                if cur is not None:
                    out.append(cur)
                continue
            if cur is None:
                continue
            line = addr >> 6
            cur[1].setdefault(line, ip)
            if parts[0] in "SM":
                cur[0].setdefault(line, ip)
    return out


def names(ips, binary, base):
    """ip -> the innermost frames of the crate's own code (or the allocator's)."""
    ips = sorted(ip for ip in ips if ip >= base)
    query = "\n".join(hex(ip - base) for ip in ips)
    res = subprocess.run(["addr2line", "-f", "-C", "-i", "-a", "-e", binary],
                         input=query, capture_output=True, text=True).stdout.split("\n")
    out, cur, frames, i = {}, None, [], 0

    def flush():
        if cur is not None:
            own = [f for f in frames if f.startswith(("scalevfs", "mi_", "_mi", "crossbeam"))]
            out[cur + base] = " < ".join(f[:70] for f in own[:3]) or (frames or ["?"])[0][:70]

    while i < len(res):
        text = res[i]
        if text.startswith("0x"):
            flush()
            cur, frames = int(text, 16), []
            i += 1
            continue
        if text:
            frames.append(text)
        i += 2
    flush()
    return out


def main():
    path, mark, binary, base = sys.argv[1], int(sys.argv[2], 16), sys.argv[3], int(sys.argv[4], 16)
    t = turns(path, mark)
    if len(t) < 2:
        sys.exit(f"conflict-audit: {len(t)} turns in the trace; is the marker {mark:#x}?")
    shared = []
    for k in range(1, len(t)):
        (aw, at), (bw, bt) = t[k - 1], t[k]
        shared += [("read after the other wrote", bt[x], aw[x]) for x in set(aw) & set(bt)]
        shared += [("wrote after the other read", bw[x], at[x]) for x in (set(bw) & set(at)) - set(aw)]
    touched = sum(len(x[1]) for x in t) / len(t)
    print(f"{len(t)} turns; per turn: {touched:.0f} lines touched, "
          f"{len(shared) / (len(t) - 1):.1f} lines passed from the other thread")
    where = names({ip for _, ip, _ in shared}, binary, base)
    count = collections.Counter((kind, where.get(ip, hex(ip))) for kind, ip, _ in shared)
    for (kind, name), n in count.most_common(30):
        print(f"{n / (len(t) - 1):8.1f}  {kind:<26}  {name}")


if __name__ == "__main__":
    main()
