#!/usr/bin/env python3
"""Compares sweeps of two builds run alternated in one device call (scripts/h200-run.sh ab4):
a point counts as slower only where every run of the new build is more than --tol (default 3%)
slower than every run of the old one, and faster likewise, so that per-process spread, which on
the H200 moves one binary's own points by more than 3%, does not count either way.

    python3 scripts/ab-compare.py --old A.json B.json --new C.json D.json [--tol 0.03]

Reads schema 2 JSON or the bare array of the 2026-11-29 runs (as scripts/regress-check.py).
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpoints import points


def medians(path):
    return {k: p["median_s"] for k, p in points(path).items() if p.get("median_s")}

def main(argv):
    tol = float(argv[argv.index("--tol") + 1]) if "--tol" in argv else 0.03
    if "--old" not in argv or "--new" not in argv:
        sys.exit(__doc__)
    def files(flag):
        i = argv.index(flag) + 1
        out = []
        while i < len(argv) and not argv[i].startswith("--"):
            out.append(argv[i])
            i += 1
        return out
    old, new = [medians(f) for f in files("--old")], [medians(f) for f in files("--new")]
    if not old or not new:
        sys.exit("need at least one run of each build")
    keys = set.intersection(*(set(r) for r in old + new))
    slower, faster = [], []
    for k in sorted(keys, key=lambda k: tuple(str(x) for x in k)):
        o = [r[k] for r in old]
        n = [r[k] for r in new]
        if min(n) > max(o) * (1 + tol):
            slower.append((k, max(o), min(n)))
        elif max(n) * (1 + tol) < min(o):
            faster.append((k, min(o), max(n)))
    print(f"{len(keys)} points in every run; {len(slower)} slower in every new run than in every old one, {len(faster)} faster likewise (tolerance {tol:.0%})")
    for k, o, n in slower:
        kind, path, d, size, _sm, var = k
        print(f"slower  {kind:11s} {path:10s} {d:6s} {size:>11d} {var}: {o*1e6:10.1f} us -> {n*1e6:10.1f} us ({o/n:.2f}x)")

if __name__ == "__main__":
    main(sys.argv[1:])
