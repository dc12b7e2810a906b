#!/bin/sh
# bench_run.sh BUILD_DIR: weft-bench end to end on the host backend: 3 ranks (an odd count, so
# per-rank sizes round down), every collective, both placements, sizes 8 B .. 32 KiB, every
# result verified exactly by the program. Checks its exit status and its JSON: one row per
# collective, size and placement (all-reduce, all-gather, reduce-scatter, broadcast: 2
# placements; all-to-all, all-to-allv: 1; 5 sizes each; the barrier 1 row: 51), each with 0
# wrong elements (but the barrier's, which has no data), the host backend, and no SM usage
# (sm_blocks and copy_engine null). Then half and bfloat16 sum and avg, whose inputs have partial
# sums exact in float32 but not in 16 bits (a reduction that rounds them early has wrong
# elements). Then that weft-bench follows WEFT_BACKEND.
set -u
build=$1
json=$(mktemp)
log=$(mktemp)
trap 'rm -f "$json" "$log"' EXIT
fail() {
    echo "FAIL: bench_run: $*"
    cat "$log"
    exit 1
}

WEFT_BACKEND=host "$build/weftrun" -n 3 "$build/weft-bench" -t all -b 8 -e 64K -f 8 -n 3 -w 1 \
    --json "$json" >"$log" 2>&1 || fail "weft-bench exited with status $?"
rows=$(grep -c '"coll"' "$json")
[ "$rows" -eq 51 ] || fail "$rows JSON rows, expected 51"
for coll in all_reduce all_gather reduce_scatter broadcast all_to_all all_to_allv barrier; do
    grep -q "\"coll\":\"$coll\"" "$json" || fail "no row for $coll"
done
bad=$(grep -v '"coll":"barrier"' "$json" | grep -vc '"wrong":0,')
[ "$bad" -eq 0 ] || fail "$bad rows without \"wrong\":0 (the barrier's alone is not checked)"
bad=$(grep -vc '"sm_blocks":null,"copy_engine":null,.*"backend":"host"' "$json")
[ "$bad" -eq 0 ] || fail "$bad rows with SM usage or another backend"

# 16-bit floats add in float32 and round once (3 ranks: with 2 a reduction adds once).
for run in "all_reduce half sum" "reduce_scatter half avg" "all_reduce bfloat16 avg" \
    "reduce_scatter bfloat16 sum"; do
    set -- $run
    WEFT_BACKEND=host "$build/weftrun" -n 3 "$build/weft-bench" -t "$1" -d "$2" -o "$3" -b 8 \
        -e 64K -f 8 -n 1 -w 0 >"$log" 2>&1 || fail "weft-bench -t $1 -d $2 -o $3: status $?"
    grep -q "Out of bounds values : 0 OK" "$log" || fail "weft-bench -t $1 -d $2 -o $3: not verified"
done

# --backend unset follows WEFT_BACKEND (it once forced auto, which ran the host backend check above
# on the CUDA backend of a GPU host): with the GPUs hidden, WEFT_BACKEND=cuda must fail at init.
CUDA_VISIBLE_DEVICES= WEFT_BACKEND=cuda "$build/weftrun" -n 1 "$build/weft-bench" -t barrier \
    -n 1 -w 0 >"$log" 2>&1 && fail "WEFT_BACKEND=cuda with no visible GPU: weft-bench succeeded"
grep -q "weft_comm_init failed" "$log" || fail "WEFT_BACKEND=cuda with no visible GPU: no init error"
echo "PASS: bench_run ($rows rows; 16-bit sums exact; WEFT_BACKEND followed)"
