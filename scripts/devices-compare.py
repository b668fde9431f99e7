#!/usr/bin/env python3
"""Issue 15's line: `vkhost bench --devices all` (one device) against the plain bench, each
row's median over several processes of each.

    devices-compare.py MATRIX.txt... -- PLAIN.json...

MATRIX.txt: the printed matrix of `vkhost bench --devices all` (its `dev0` column: the device
alone); PLAIN.json: `vkhost bench --json` of the same paths and sizes. Prints, per path, dir and
size, the median GB/s of each side over its runs, their ratio, and whether it is within 3%;
exit code 1 if any row is not (or a row is missing on one side)."""
import json
import re
import statistics
import sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_of(label):
    m = re.fullmatch(r"(\d+)([KMG]?)", label)
    return int(m.group(1)) * UNITS.get(m.group(2), 1)


def matrix(path):
    """{(path, dir, size): GB/s of dev0} from one matrix printout."""
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 4 and f[0] in ("pinned", "registered", "pageable") and f[1] in ("h2d", "d2h"):
            try:
                out[(f[0], f[1], size_of(f[2]))] = float(f[3])
            except (ValueError, AttributeError):
                pass
    return out


def plain(path):
    d = json.load(open(path))
    rows = d if isinstance(d, list) else d["results"]
    out = {}
    for p in rows:
        if p.get("api") == "vulkan" and p.get("kind") == "copy" and p.get("dir") in ("h2d", "d2h"):
            if p.get("path") in ("pinned", "registered", "pageable") and p.get("gbps"):
                out[(p["path"], p["dir"], p["size"])] = p["gbps"]
    return out


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    i = argv.index("--")
    mats, plains = [matrix(p) for p in argv[:i]], [plain(p) for p in argv[i + 1 :]]
    if not mats or not plains:
        sys.exit(__doc__)
    keys = sorted(set().union(*mats) | set().union(*plains), key=lambda k: (["pinned", "registered", "pageable"].index(k[0]), k[1], k[2]))
    bad = 0
    print(f"{'path':<11} {'dir':<4} {'size':>11} {'matrix':>8} {'plain':>8} {'ratio':>6}  runs")
    for k in keys:
        m = [x[k] for x in mats if k in x]
        p = [x[k] for x in plains if k in x]
        if not m or not p:
            print(f"{k[0]:<11} {k[1]:<4} {k[2]:>11} missing on one side ({len(m)} matrix, {len(p)} plain runs)")
            bad += 1
            continue
        mm, pm = statistics.median(m), statistics.median(p)
        r = mm / pm
        ok = abs(r - 1) <= 0.03
        bad += not ok
        print(f"{k[0]:<11} {k[1]:<4} {k[2]:>11} {mm:8.2f} {pm:8.2f} {r:6.3f}  {len(m)}+{len(p)}{'' if ok else '  MORE THAN 3% APART'}")
    print(f"{len(keys)} rows, {bad} more than 3% apart (medians over {len(mats)} matrix and {len(plains)} plain processes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
