"""The Vulkan copy-engine, latency, cost and find points of a `vkhost bench --json` file, keyed
for comparison between runs: schema 2, or the bare array of the 2026-11-29 runs. Shared by
scripts/regress-check.py and scripts/ab-compare.py."""
import json


def points(path):
    """{(kind, path, dir, size, sm, variant): point}; the _sm testcases are left out (the old
    runs had none)."""
    d = json.load(open(path))
    rows = d if isinstance(d, list) else d["results"]
    out = {}
    for p in rows:
        if p.get("api") != "vulkan" or p.get("sm") or str(p.get("testcase", "")).endswith("_sm"):
            continue
        key = (p.get("kind"), p.get("path"), p.get("dir"), p.get("size"), bool(p.get("sm")), p.get("variant") or "")
        # The old array has no variant: its bidir rows are the default queue pair.
        if key[5] == "copy-copy":
            key = key[:5] + ("",)
        out[key] = p
    return out
