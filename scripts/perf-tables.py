#!/usr/bin/env python3
"""Markdown tables for docs/PERFORMANCE.md from a `vkhost bench --baseline cuda --json` file.

    python3 scripts/perf-tables.py bench.json [--min-size 16M]
Prints: the path x direction table with CUDA ratios (sizes >= --min-size, or all with --all),
4 KiB latency, small-async figures, costs, find, and bidir start/end times.
"""
import json, sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse(s):
    s = s.strip().upper()
    return int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)


def label(n):
    for u, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {u}"
    return f"{n} B"


def main():
    path = sys.argv[1]
    min_size = parse(sys.argv[sys.argv.index("--min-size") + 1]) if "--min-size" in sys.argv else 0
    d = json.load(open(path))
    # Copy-engine points only: an `_sm` point has the path, direction and size of its `_ce` twin.
    ce = [p for p in d if p["kind"] == "copy" and not p.get("testcase", "").endswith("_sm")]
    v = {(p["path"], p["dir"], p["size"]): p for p in ce if p["api"] == "vulkan"}
    c = {(p["path"], p["dir"], p["size"]): p for p in ce if p["api"] == "cuda"}
    print("| size | path | h2d GB/s | CUDA | ratio | d2h GB/s | CUDA | ratio | bidir GB/s | CUDA | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sorted({k[2] for k in v}):
        if s < min_size:
            continue
        for p in ["pinned", "registered", "pageable", "bar"]:
            row = [label(s), p]
            for dr in ["h2d", "d2h", "bidir"]:
                x = v.get((p, dr, s))
                cp = c.get(("pinned" if p in ("pinned", "registered") else "pageable", dr, s))
                if x is None:
                    row += ["–", "", ""]
                    continue
                row.append(f"{x['gbps']:.2f}")
                row += [f"{cp['gbps']:.2f}", f"**{x['gbps'] / cp['gbps']:.2f}x**"] if cp and p != "bar" else ["", ""]
            print("| " + " | ".join(row) + " |")
    print()
    for p in d:
        if p["kind"] == "copy" and p["size"] == 4096 and p["dir"] in ("h2d", "d2h") and p["path"] in ("pinned", "pageable"):
            print(f"latency {p['api']} {p['path']} {p['dir']}: {p['median_s'] * 1e6:.1f} us")
    for p in d:
        if p["kind"] == "small-async":
            print(f"small {p['api']} {p['dir']}: {p['median_s'] * 1e3:.2f} ms  {p.get('note', '')}")
        if p["kind"] == "find":
            print(f"find {p['size']}: {p['median_s'] * 1e9:.0f} ns")
        if p["kind"] == "cost" and p["size"] >= (1 << 20):
            print(f"cost {p['dir']} {label(p['size'])}: {p['median_s'] * 1e3:.2f} ms")
        if p["api"] == "vulkan" and p["dir"] == "bidir" and p["path"] == "pinned" and p["size"] >= (256 << 20):
            e = p["extra"]
            print(f"bidir {label(p['size'])}: h2d {e['h2d_start_us']:.0f}-{e['h2d_end_us']:.0f} us, "
                  f"d2h {e['d2h_start_us']:.0f}-{e['d2h_end_us']:.0f} us, {p['gbps']:.2f} GB/s ({e['queues']})")


main()
