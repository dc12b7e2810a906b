#!/bin/sh
# calibrate_synthetic.sh BUILD_DIR: weft-calibrate --synthetic's fits, held-out check and JSON
# hold numbers, for seeds 1..4 with -r 2 and the default sweeps, read from its --json file.
#
# The synthetic platform (calibrate_synthetic.c): R = 150, 400, 100 GB/s (oneway, local,
# alltoall); K producers issue at P = min(50 K, 600) GB/s after 2 us, so T_iss0(K, V) = 2 us +
# V / P; Q(K) = 2 MiB * min(K, 32) / 32; 1% uniform noise on every issue time and gap.
#  - Fits: R and T_iss0(K, -p) within 3% of the platform's (the noise alone keeps them within
#    0.5%); a knee is fitted in every repeat exactly where P > R (elsewhere the issuer cannot
#    outpace the drain), with Q(K) within 10% and V_k within 20% of the model's knee, where
#    V - R * T_iss0(K, V) = Q(K) (the knee fit is coarser: up to 5.6% and 13% for these seeds).
#  - Held-out check: per pattern and set, the points and unpredicted counts are the JSON's own
#    points of that set (those with a null prediction being the unpredicted ones, exactly the
#    points of a K whose knee that repeat did not fit), and the held-out points number ranks x
#    repeats x the held-out settings the JSON lists; the reported median and max relative
#    errors of the issue time and the period are those recomputed from the points; and the
#    held-out errors are small: issue median <= 0.8% (the noise alone gives 0.5%), max <= 10%,
#    period median <= 0.3%, max <= 3% (for these seeds at most 0.66%, 7.3%, 0.21%, 1.7%).
# Parsed with python3; exits 77 (skipped) without it.
set -u
build=$1
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: calibrate_synthetic: no python3 to parse the JSON"
    exit 77
fi
json=$(mktemp)
log=$(mktemp)
trap 'rm -f "$json" "$log"' EXIT
failures=0

for seed in 1 2 3 4; do
    rc=0
    "$build/weft-calibrate" --synthetic "$seed" -r 2 --json "$json" >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL: calibrate_synthetic: --synthetic $seed -r 2 --json: exit status $rc"
        cat "$log"
        failures=$((failures + 1))
        continue
    fi
    python3 - "$json" "$seed" <<'PY' || failures=$((failures + 1))
import json
import sys

seed = sys.argv[2]
with open(sys.argv[1]) as f:
    d = json.load(f)
drain = {"oneway": 150.0, "local": 400.0, "alltoall": 100.0}
plateau = d["options"]["plateau_bytes"]
repeats = d["options"]["repeats"]
ranks = d["machine"]["ranks"]
fails = []


def near(what, got, want, tol):
    if got is None or abs(got / want - 1) > tol:
        fails.append(f"{what}: {got}, the platform's {want:.6g} (tolerance {tol:.0%})")


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


# Fits.
knee_fitted = {}  # (pattern, repeat, K) -> whether that repeat fitted a knee at K
for pattern, p in d["params"].items():
    r = drain[pattern]
    near(f"{pattern} R", p["drain_gbps"]["median"], r, 0.03)
    for row in p["rows"]:
        k = row["producers"]
        peak = min(50.0 * k, 600.0)  # GB/s = 1e3 bytes/us
        near(f"{pattern} K={k} T_iss0", row["t_iss0_us"]["median"], 2 + plateau / (peak * 1e3),
             0.03)
        reps = row["knee_bytes"]["repeats"]
        for i, v in enumerate(reps):
            knee_fitted[pattern, i, k] = v is not None
        if peak <= r:
            if any(v is not None for v in reps):
                fails.append(f"{pattern} K={k}: a knee fitted ({reps}) where the issuer "
                             f"({peak:g} GB/s) cannot outpace the drain ({r:g} GB/s)")
            continue
        if any(v is None for v in reps):
            fails.append(f"{pattern} K={k}: no knee fitted in some repeat ({reps})")
        q = 2097152.0 * min(k, 32) / 32
        near(f"{pattern} K={k} Q", row["capacity_bytes"]["median"], q, 0.10)
        near(f"{pattern} K={k} V_k", row["knee_bytes"]["median"], (q + 2 * r * 1e3) / (1 - r / peak),
             0.20)

# Held-out check against the points.
h = d["holdout"]
nk = len(next(iter(d["params"].values()))["rows"])
held_settings = len(h["rate_bytes"]) + nk * (len(h["plateau_gap_factors"]) + len(h["knee_bytes"]))
limits = {("issue_rel_err", "median"): 0.008, ("issue_rel_err", "max"): 0.10,
          ("period_rel_err", "median"): 0.003, ("period_rel_err", "max"): 0.03}
for pattern in d["params"]:
    for s in ("holdout", "fit"):
        c = d["check"][pattern][s]
        pts = [x for x in d["raw"] if x["pattern"] == pattern and x["set"] == s]
        pred = [x for x in pts if x["predicted_issue_us"] is not None and
                x["predicted_period_us"] is not None and x["issue_us"] > 0 and x["period_us"] > 0]
        if c["points"] != len(pred) or c["unpredicted"] != len(pts) - len(pred):
            fails.append(f"{pattern} {s}: check says {c['points']} points, {c['unpredicted']} "
                         f"unpredicted; the JSON has {len(pred)} predicted of {len(pts)}")
        predicted = {id(x) for x in pred}
        for x in pts:
            want = knee_fitted[pattern, x["repeat"], x["producers"]]
            if (id(x) in predicted) != want:
                fails.append(f"{pattern} {s}: point {x} predicted or not, against its knee fit")
                break
        if s == "holdout" and len(pts) != ranks * repeats * held_settings:
            fails.append(f"{pattern}: {len(pts)} held-out points, expected {ranks} ranks x "
                         f"{repeats} repeats x {held_settings} held-out settings")
        for metric, meas, pr in (("issue_rel_err", "issue_us", "predicted_issue_us"),
                                 ("period_rel_err", "period_us", "predicted_period_us")):
            errs = [abs(x[pr] - x[meas]) / x[meas] for x in pred]
            if not errs:
                fails.append(f"{pattern} {s}: no predicted point")
                continue
            for stat, val in (("median", median(errs)), ("max", max(errs))):
                got = c[metric][stat]
                if got is None or abs(got - val) > 2e-5 + 1e-3 * val:
                    fails.append(f"{pattern} {s} {metric} {stat}: reported {got}, recomputed "
                                 f"from the points {val:.6g}")
                if s == "holdout" and got is not None and got > limits[metric, stat]:
                    fails.append(f"{pattern} holdout {metric} {stat}: {got} > "
                                 f"{limits[metric, stat]}")

for f in fails:
    print(f"FAIL: calibrate_synthetic: --synthetic {seed}: {f}")
sys.exit(1 if fails else 0)
PY
done

[ "$failures" -eq 0 ] || exit 1
echo "PASS: calibrate_synthetic"
