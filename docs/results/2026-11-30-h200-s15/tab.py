#!/usr/bin/env python3
"""Median time_us per (size, mode) over repetitions: tab.py DIR PREFIX MODE..."""
import json, sys, glob, statistics, collections
d, prefix, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
t = collections.defaultdict(list); wrong = 0
for m in modes:
    for f in glob.glob(f"{d}/{prefix}_{m}_r*.json"):
        for line in open(f):
            r = json.loads(line); wrong += r.get("wrong") or 0
            t[(r["coll"], r["size"], r["inplace"], m)].append(r["time_us"])
keys = sorted({k[:3] for k in t})
print("coll size inplace " + " ".join(f"{m:>9}" for m in modes) + "  (median us)")
for k in keys:
    row = [statistics.median(t[k + (m,)]) if t.get(k + (m,)) else float("nan") for m in modes]
    print(f"{k[0]} {k[1] >> 10}K {k[2]} " + " ".join(f"{v:9.1f}" for v in row))
print("wrong total", wrong)
