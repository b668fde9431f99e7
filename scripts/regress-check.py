#!/usr/bin/env python3
"""Compares a bench JSON (schema 2) with an older one (schema 2 or the bare array of the
2026-11-29 runs): every Vulkan copy-engine, latency, cost and find point both have (kind, path, dir, size; the
_sm testcases are left out: the old runs had none), listing those more
than --tol (default 3%) worse in the newer run (time per operation; costs and find included).

    python3 scripts/regress-check.py OLD.json NEW.json [--tol 0.03]
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpoints import points

args = [a for a in sys.argv[1:] if not a.startswith("--")]
tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 0.03
old, new = points(args[0]), points(args[1])
worse, compared = [], 0
for k in sorted(set(old) & set(new), key=lambda k: tuple(str(x) for x in k)):
    a, b = old[k]["median_s"], new[k]["median_s"]
    if not a or not b:
        continue
    compared += 1
    if b > a * (1 + tol):
        worse.append((k, a, b))
for k, a, b in worse:
    kind, path, d, size, sm, var = k
    print(f"{kind:11s} {path:10s} {d:6s} {size:>11d}{' sm' if sm else ''} {var}: {a*1e6:10.1f} us -> {b*1e6:10.1f} us ({a/b:.2f}x)")
print(f"{compared} points compared, {len(worse)} more than {tol:.0%} worse")
