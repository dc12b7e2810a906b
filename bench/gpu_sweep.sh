#!/usr/bin/env bash
# gpu_sweep.sh BUILD_DIR OUT_DIR [RANKS] - the steady-state weft-bench sweep on the CUDA backend:
# every collective, zero-copy (weft_malloc) vs staged (cudaMalloc) vs the copy-engine path,
# 8 B .. 1 GiB. Several ranks on one GPU run under MPS (started and stopped here); on a
# multi-GPU host each rank takes the GPU of its LOCAL_RANK. Results verified exactly up to
# 16 MiB (checking 1 GiB on the CPU would dominate the run). Writes OUT_DIR/gpu_sweep_<path>.json
# (path: zero_copy, staged, copy_engine) and the tables to OUT_DIR/gpu_sweep.log; prints a
# summary last. The copy-engine path holds no SM while copying (two one-block kernels per call
# wait for the peers and signal completion); the other two run with WEFT_CUDA_COPY_ENGINE=0, so
# that they measure the SM kernel at every size (the default, auto, moves large copies between
# GPUs to the copy engines). Exit status 1 if a run failed or any element was wrong, 2 on a usage
# error (RANKS, when given, is a positive number).
set -uo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ] || { [ $# -eq 3 ] && ! [[ $3 =~ ^[1-9][0-9]*$ ]]; }; then
    echo "usage: $0 BUILD_DIR OUT_DIR [RANKS]" >&2
    exit 2
fi
build=$1
out=$2
ranks=${3:-4}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda WEFT_CUDA_COPY_ENGINE=0
# shellcheck source=tools/mps.sh
source "$(dirname "$0")/../tools/mps.sh"
ngpu=$(mps_gpus)
if [ "$ngpu" -lt "$ranks" ]; then
    trap mps_finish EXIT
    mps_start
fi
log=$out/gpu_sweep.log
: >"$log"
fail=0
run() { # path, label, then weft-bench arguments
    local path=$1 label=$2
    shift 2
    echo "## $path $label: weft-bench $*" >>"$log"
    if ! timeout 300 "$build/weftrun" -n "$ranks" "$build/weft-bench" \
        --json "$out/gpu_sweep_$path.json" "$@" >>"$log" 2>&1; then
        echo "FAILED: $path $label $*" | tee -a "$log"
        fail=1
    fi
}
rm -f "$out"/gpu_sweep_*.json
for coll in all_reduce all_gather reduce_scatter broadcast all_to_all all_to_allv; do
    for buffers in weft malloc; do
        path=$([ $buffers = weft ] && echo zero_copy || echo staged)
        run $path "$coll" -t "$coll" --buffers $buffers -b 8 -e 16M -f 8 -n 20 -w 3 -c 1
        run $path "$coll" -t "$coll" --buffers $buffers -b 128M -e 1G -f 8 -n 10 -w 2 -c 0
    done
done
for coll in all_gather broadcast all_to_all; do
    WEFT_CUDA_COPY_ENGINE=1 run copy_engine "$coll" -t "$coll" -b 8 -e 16M -f 8 -n 20 -w 3 -c 1
    WEFT_CUDA_COPY_ENGINE=1 run copy_engine "$coll" -t "$coll" -b 128M -e 1G -f 8 -n 10 -w 2 -c 0
done
run zero_copy barrier -t barrier -n 200 -w 20
echo "# ranks $ranks on $ngpu GPU(s), MPS $mps_on; out-of-place: path coll size time_us busbw"
python3 - "$out" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "gpu_sweep_*.json"))):
    path = os.path.basename(f)[len("gpu_sweep_"):-len(".json")]
    for line in open(f):
        r = json.loads(line)
        if r["inplace"]:
            continue
        print(f'{path:12s} {r["coll"]:15s} {r["size"]:>11} {r["time_us"]:10.1f} '
              f'{r["busbw_gbps"]:8.1f} wrong={r["wrong"]}')
PY
exit $fail
