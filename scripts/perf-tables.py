#!/usr/bin/env python3
"""Markdown tables for docs/PERFORMANCE.md from a `vkhost bench --baseline cuda --json` file
(schema version 2: {run, results}; docs/BENCH.md).

    python3 scripts/perf-tables.py bench.json [--min-size 16M] [--cuda-py cuda_baseline.txt]

Prints the run's machine line, then one table per testcase: size, vkhost GB/s (median, with
min-max), CUDA GB/s from the same process where the testcase has a CUDA counterpart, and the
ratio; latency testcases in microseconds; costs and find; small-async.
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
    if not isinstance(d, dict) or "results" not in d:
        sys.exit("not a schema-2 file ({run, results}); older files are bare arrays")
    run, res = d["run"], d["results"]
    dev = run.get("device", {})
    pcie = run.get("pcie", {}) or {}
    print(f"- run: {run.get('time')} commit `{run.get('git_commit')}` on {run.get('host', {}).get('hostname', '?')}, "
          f"{dev.get('name')} ({dev.get('driver_name')} {dev.get('driver_info', '').strip()}), "
          f"PCIe Gen{pcie.get('generation', '?')} x{pcie.get('width', '?')}, CPUs {run.get('affinity', {}).get('cpus')}, "
          f"{run.get('duration_s', 0):.0f} s, failures {run.get('failures')}")
    q = dev.get("copy_queues")
    if q:
        print(f"- copy queues: h2d {q['small_h2d']} below {label(q['bulk_min_h2d_bytes'])}, {q['bulk_h2d']} from it; "
              f"d2h {q['small_d2h']} below {label(q['bulk_min_d2h_bytes'])}, {q['bulk_d2h']} from it")
    print()
    order = []
    for p in res:
        if p["testcase"] not in order:
            order.append(p["testcase"])
    for tc in order:
        pts = [p for p in res if p["testcase"] == tc]
        kind = pts[0]["kind"]
        if kind in ("cost", "find", "small-async"):
            continue
        vk = {(p["size"], p.get("variant") or ""): p for p in pts if p["api"] == "vulkan"}
        cu = {(p["size"], p.get("variant") or ""): p for p in pts if p["api"] == "cuda"}
        rows = sorted(k for k in vk if k[0] >= min_size or kind == "latency")
        if not rows:
            continue
        lat = kind == "latency"
        print(f"**{tc}**\n")
        if lat:
            print("| size | vkhost us (min-max) | CUDA us | CUDA/vkhost |")
            print("|---|---|---|---|")
        else:
            print("| size | vkhost GB/s (min-max) | CUDA GB/s | ratio | note |")
            print("|---|---|---|---|---|")
        for k in rows:
            p = vk[k]
            c = cu.get(k)
            if lat:
                v = p["median_s"] * 1e6
                cs = f"{c['median_s'] * 1e6:.1f}" if c else ""
                r = f"**{c['median_s'] * 1e6 / v:.1f}x**" if c else ""
                print(f"| {label(k[0])} | {v:.1f} ({p['min_s'] * 1e6:.1f}-{p['max_s'] * 1e6:.1f}) | {cs} | {r} |")
            else:
                g = p["gbps"] or 0
                cs = f"{c['gbps']:.2f}" if c and c.get("gbps") else ""
                r = f"**{g / c['gbps']:.2f}x**" if c and c.get("gbps") else ""
                flag = " !" if p.get("unstable") else ""
                note = (p.get("note") or "") + (f" {k[1]}" if k[1] else "")
                print(f"| {label(k[0])} | {g:.2f} ({p['min_gbps']:.2f}-{p['max_gbps']:.2f}){flag} | {cs} | {r} | {note.strip()} |")
        print()
    small = [p for p in res if p["kind"] == "small-async"]
    if small:
        print("**small async** (1000 x 4 KiB)\n")
        print("| testcase | api | variant | ms | note |")
        print("|---|---|---|---|---|")
        for p in small:
            print(f"| {p['testcase']} | {p['api']} | {p.get('variant')} | {p['median_s'] * 1e3:.2f} | {p.get('note', '')} |")
        print()
    costs = [p for p in res if p["kind"] == "cost"]
    if costs:
        print("**costs**\n")
        print("| what | size | api | median ms |")
        print("|---|---|---|---|")
        for p in costs:
            print(f"| {p['dir']} | {label(p['size'])} | {p['api']} | {p['median_s'] * 1e3:.2f} |")
        print()
    for p in res:
        if p["kind"] == "find":
            print(f"- find with {p['size']} live registrations: {p['median_s'] * 1e9:.0f} ns")


main()
