#!/usr/bin/env python3
"""plot_burst_gap.py - measured against predicted issue times from a weft-calibrate JSON.

    python3 bench/plot_burst_gap.py CALIBRATE.json [OUT.svg] [--png]

Reads the JSON that `weft-calibrate --json FILE` writes (docs/burst_gap.md, "Held-out check")
and draws one log-log panel per traffic pattern: every point's measured issue time against the
issue time the fitted Burst-Gap model predicts for it, the line y = x, points held out of the fits
filled and points the fits saw hollow, one colour per sweep (rate, plateau, knee). Each panel's
legend gives the held-out points' median and max relative error |predicted - measured| / measured
as weft-calibrate computed them (the JSON's "check"); the title gives the machine and the date.
Points without a prediction (no fitted row for their K) are counted in the panel, not drawn.

Writes OUT.svg (default: the JSON's name with .svg), and with --png a PNG beside it. Exits 2 on
a usage error or a JSON that is not weft-calibrate's.

Needs Python 3.8+ and matplotlib, e.g. in a virtual environment:
    python3 -m venv /tmp/venv-plot && /tmp/venv-plot/bin/pip install matplotlib
    /tmp/venv-plot/bin/python bench/plot_burst_gap.py results.json
or from Debian: apt-get install python3-matplotlib.
"""

import argparse
import json
import math
import os
import sys

PATTERNS = ("oneway", "local", "alltoall")
# Drawn in this order: the knee sweep's many points first, so the plateau's (whose issue times
# sit among the small knee volumes') stay visible.
SWEEPS = {"knee": "tab:green", "rate": "tab:red", "plateau": "tab:blue"}


def fail(msg):
    print("plot_burst_gap.py: " + msg, file=sys.stderr)
    sys.exit(2)


def load(path):
    """The JSON, checked for the members the plot reads."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))
    if doc.get("tool") != "weft-calibrate":
        fail("%s: not a weft-calibrate JSON (no \"tool\": \"weft-calibrate\")" % path)
    for key in ("machine", "date", "raw", "check"):
        if key not in doc:
            fail("%s: no \"%s\" (written by a weft-calibrate without the held-out check?)"
                 % (path, key))
    return doc


def percent(x):
    return "n/a" if x is None else "%.3g%%" % (100.0 * x)


def panel(ax, doc, pattern, ticker):
    """One pattern's points on ax; returns the number drawn."""
    drawn = unpredicted = 0
    lo, hi = math.inf, 0.0
    for sweep, colour in SWEEPS.items():
        for held in (False, True):
            xs, ys = [], []
            for p in doc["raw"]:
                if p["pattern"] != pattern or p["sweep"] != sweep:
                    continue
                if (p["set"] == "holdout") != held:
                    continue
                meas, pred = p["issue_us"], p["predicted_issue_us"]
                if pred is None or meas is None or meas <= 0 or pred <= 0:
                    unpredicted += 1
                    continue
                xs.append(meas)
                ys.append(pred)
            if not xs:
                continue
            drawn += len(xs)
            lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
            label = "%s, %s (%d)" % (sweep, "held out" if held else "fitted", len(xs))
            if held:
                ax.scatter(xs, ys, s=22, marker="o", color=colour, edgecolors="black",
                           linewidths=0.4, label=label, zorder=3)
            else:
                ax.scatter(xs, ys, s=14, marker="o", facecolors="none", edgecolors=colour,
                           linewidths=0.7, alpha=0.6, label=label, zorder=2)
    ax.set_title(pattern)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured issue time (us)")
    plain = ticker.FuncFormatter(lambda v, _: "%g" % v)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(ticker.NullFormatter())
    ax.grid(True, which="major", linewidth=0.3)
    if drawn:
        span = (lo / 1.5, hi * 1.5)
        ax.plot(span, span, color="gray", linewidth=0.8, linestyle="--", label="y = x", zorder=1)
        ax.set_xlim(span)
        ax.set_ylim(span)
    check = doc["check"].get(pattern, {}).get("holdout", {})
    err = check.get("issue_rel_err", {})
    ax.plot([], [], " ", label="held out: %s points, error median %s, max %s"
            % (check.get("points", 0), percent(err.get("median")), percent(err.get("max"))))
    if unpredicted:
        ax.plot([], [], " ", label="%d points without a prediction" % unpredicted)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    return drawn


def main():
    ap = argparse.ArgumentParser(description="Plot a weft-calibrate JSON: measured against "
                                 "predicted issue times, fitted and held-out points.")
    ap.add_argument("json", help="the file weft-calibrate --json wrote")
    ap.add_argument("out", nargs="?", help="the SVG to write (default: JSON name with .svg)")
    ap.add_argument("--png", action="store_true", help="also write a PNG beside the SVG")
    args = ap.parse_args()
    doc = load(args.json)
    out = args.out or os.path.splitext(args.json)[0] + ".svg"
    if not out.endswith(".svg"):
        fail("%s: the output must end in .svg" % out)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    fig, axes = plt.subplots(1, len(PATTERNS), figsize=(5.5 * len(PATTERNS), 7))
    drawn = sum(panel(ax, doc, pattern, ticker) for ax, pattern in zip(axes, PATTERNS))
    axes[0].set_ylabel("predicted issue time (us)")
    m = doc["machine"]
    fig.suptitle("weft-calibrate, Burst-Gap model check: %s, %s ranks on %s GPU(s), %s (%s)"
                 % (m.get("device"), m.get("ranks"), m.get("gpus"), doc.get("label"),
                    doc["date"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    print("plot_burst_gap.py: %d points -> %s" % (drawn, out))
    if args.png:
        png = out[:-len(".svg")] + ".png"
        fig.savefig(png, dpi=150)
        print("plot_burst_gap.py: -> %s" % png)
    if drawn == 0:
        fail("%s: no point has both a measurement and a prediction" % args.json)


if __name__ == "__main__":
    main()
