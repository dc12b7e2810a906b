#!/bin/sh
# calibrate_json.sh BUILD_DIR: weft-calibrate --synthetic's --json file is valid JSON that reads
# back what was written. The synthetic device name, synthetic (seed 1, "no GPU"), has quotes,
# which the JSON strings must escape (device, driver, date and label were once written with a
# bare "%s"). With -V 64K every R is left out (the rate sweep is not drain-bound): null in the
# JSON. Parsed with python3; exits 77 (skipped) without it.
set -u
build=$1
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: calibrate_json: no python3 to parse the JSON"
    exit 77
fi
json=$(mktemp)
log=$(mktemp)
trap 'rm -f "$json" "$log"' EXIT
fail() {
    echo "FAIL: calibrate_json: $*"
    cat "$log"
    exit 1
}

"$build/weft-calibrate" --synthetic 1 -r 1 -V 64K --json "$json" >"$log" 2>&1 ||
    fail "weft-calibrate --synthetic 1 -r 1 -V 64K --json exited with status $?"
python3 - "$json" >>"$log" 2>&1 <<'PY' || fail "the JSON does not read back (above)"
import json
import re
import sys

with open(sys.argv[1]) as f:
    d = json.load(f)
want = {"label": "synthetic", "device": 'synthetic (seed 1, "no GPU")', "driver": "none"}
got = {"label": d["label"], "device": d["machine"]["device"], "driver": d["machine"]["driver"]}
assert got == want, f"strings read back as {got}, expected {want}"
assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d["date"]), f"date {d['date']!r}"
for pattern, p in d["params"].items():
    assert p["drain_gbps"]["median"] is None, f"{pattern}: R {p['drain_gbps']} with -V 64K"
assert d["raw"], "no points"
PY
echo "PASS: calibrate_json"
