#!/usr/bin/env python3
"""Compares bench JSON (schema 2) with an older one (schema 2 or the bare array of the
2026-11-29 runs): every Vulkan copy-engine, latency, cost and find point both have (kind, path, dir, size; the
_sm testcases are left out: the old runs had none), listing those more
than --tol (default 3%) worse in the newer run (time per operation; costs and find included).

    python3 scripts/regress-check.py OLD.json NEW.json [NEW2.json ...] [--tol 0.03]

With several NEW files (runs of the same command in separate processes), each point's newer
time is the median of its per-run medians: on the H200 single processes differ by up to 10%
(driver allocation costs 1.7x), so one process is a sample, not the machine.
"""
import os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpoints import points

argv = sys.argv[1:]
tol = 0.03
if "--tol" in argv:
    i = argv.index("--tol")
    tol = float(argv[i + 1])
    del argv[i : i + 2]
if len(argv) < 2:
    sys.exit(__doc__)
old = points(argv[0])
runs = [points(p) for p in argv[1:]]
new = {}
for k in set().union(*runs):
    vals = [r[k]["median_s"] for r in runs if k in r and r[k]["median_s"]]
    if vals:
        new[k] = {"median_s": statistics.median(vals), "n": len(vals)}
worse, compared = [], 0
for k in sorted(set(old) & set(new), key=lambda k: tuple(str(x) for x in k)):
    a, b = old[k]["median_s"], new[k]["median_s"]
    if not a or not b:
        continue
    compared += 1
    if b > a * (1 + tol):
        worse.append((k, a, b, new[k]["n"]))
for k, a, b, n in worse:
    kind, path, d, size, sm, var = k
    of = f" (median of {n})" if len(runs) > 1 else ""
    print(f"{kind:11s} {path:10s} {d:6s} {size:>11d}{' sm' if sm else ''} {var}: {a*1e6:10.1f} us -> {b*1e6:10.1f} us ({a/b:.2f}x){of}")
runs_note = f", newer time the median over {len(runs)} runs" if len(runs) > 1 else ""
print(f"{compared} points compared{runs_note}, {len(worse)} more than {tol:.0%} worse")
