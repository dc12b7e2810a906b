#!/usr/bin/env bash
# gpu_vs_nccl.sh BUILD_DIR OUT_DIR [RANKS] - weft against NCCL on the CUDA backend, side by side
# in one run: every collective, 8 B .. 1 GiB, the same sweep through weft-bench (zero-copy:
# weft_malloc'ed buffers) and weft-bench-nccl (the same program with the calls issued through
# NCCL, on cudaMalloc'ed buffers), alternating per collective. Both verify their results exactly
# up to 16 MiB. One rank per GPU by default (LOCAL_RANK picks the device); more ranks than GPUs
# run under MPS (started and stopped here). NCCL_NVLS_ENABLE=0 (no NVLink multicast).
#
# BUILD_DIR must hold weft-bench and weft-bench-nccl (configure with WEFT_NCCL_ROOT, e.g. the
# nvidia/nccl folder of PyTorch's wheel: bench/nccl_root.sh prints it). Writes
# OUT_DIR/vs_nccl_{weft,nccl}.json (weft-bench --json rows), OUT_DIR/vs_nccl.log (the tables)
# and OUT_DIR/vs_nccl.md (the joined table: latency, busbw and the ratio per size); prints the
# joined table last. Exit status 1 if a run failed or any element was wrong, 2 on a usage error
# (RANKS, when given, is a positive number).
set -uo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ] || { [ $# -eq 3 ] && ! [[ $3 =~ ^[1-9][0-9]*$ ]]; }; then
    echo "usage: $0 BUILD_DIR OUT_DIR [RANKS]" >&2
    exit 2
fi
build=$1
out=$2
# shellcheck source=tools/mps.sh
source "$(dirname "$0")/../tools/mps.sh"
ngpu=$(mps_gpus)
ranks=${3:-$ngpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
if [ "$ngpu" -lt "$ranks" ]; then
    trap mps_finish EXIT
    mps_start
fi
log=$out/vs_nccl.log
: >"$log"
rm -f "$out"/vs_nccl_*.json
fail=0
run() { # library, then weft-bench arguments
    local lib=$1 prog=weft-bench
    shift
    [ "$lib" = nccl ] && prog=weft-bench-nccl
    echo "## $lib: weftrun -n $ranks $prog $*" >>"$log"
    if ! timeout 300 "$build/weftrun" -n "$ranks" "$build/$prog" --inplace 0 \
        --json "$out/vs_nccl_$lib.json" "$@" >>"$log" 2>&1; then
        echo "FAILED: $lib $*" | tee -a "$log"
        fail=1
    fi
}
for coll in all_reduce all_gather reduce_scatter broadcast all_to_all all_to_allv; do
    for lib in weft nccl; do
        run $lib -t "$coll" -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
        run $lib -t "$coll" -b 128M -e 1G -f 8 -n 10 -w 3 -c 0
    done
done
grep -h "library under test" "$log" | sort -u
python3 - "$out" "$ranks" "$ngpu" <<'PY' | tee "$out/vs_nccl.md"
import json, os, sys
out, ranks, ngpu = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {}
for lib in ("weft", "nccl"):
    path = os.path.join(out, f"vs_nccl_{lib}.json")
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            rows[(r["coll"], r["size"], lib)] = r
print(f"{ranks} ranks on {ngpu} GPU(s), float32 sum, out of place; time = max over ranks of "
      "the per-rank median; ratio = NCCL time / weft time (> 1: weft faster)\n")
print("| collective | size (B) | weft (us) | NCCL (us) | weft busbw (GB/s) | NCCL busbw (GB/s) "
      "| ratio | wrong (weft/NCCL) |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for coll, size in sorted({(c, s) for c, s, _ in rows}, key=lambda k: (k[0], k[1])):
    w, n = rows.get((coll, size, "weft")), rows.get((coll, size, "nccl"))
    if not w or not n:
        continue
    ratio = n["time_us"] / w["time_us"] if w["time_us"] > 0 else float("nan")
    print(f'| {coll} | {size} | {w["time_us"]:.1f} | {n["time_us"]:.1f} | '
          f'{w["busbw_gbps"]:.1f} | {n["busbw_gbps"]:.1f} | {ratio:.2f} | '
          f'{w["wrong"]}/{n["wrong"]} |')
PY
if grep -q '"wrong":[1-9]' "$out"/vs_nccl_*.json 2>/dev/null; then
    echo "FAILED: wrong elements (see $log)"
    fail=1
fi
exit $fail
