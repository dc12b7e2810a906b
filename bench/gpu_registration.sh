#!/usr/bin/env bash
# gpu_registration.sh - the GPU registration benchmarks in one go (docs/bench.md, "GPU registration
# benchmarks"): GPUREG_RANKS ranks (default 4), each on the GPU of its LOCAL_RANK modulo the GPU
# count; under MPS when there are more ranks than GPUs.
#
#   bench/gpu_registration.sh BUILD_DIR OUT_DIR
#
# Steps, in this order, each writing OUT_DIR/<name>.log and OUT_DIR/<name>.json:
#   first_use           weftrun -n 4 first-use, weft's allocator as configured (chunks by default)
#   first_use_busy      the same with --gap-kind busy (the GPU computes during the gaps)
#   launch_cost_chunk0  weftrun -n 4 launch-cost with WEFT_CUDA_CHUNK_BYTES=0: a segment per
#                       allocation, so 1000 x 3 imported mappings per process
#   first_use_chunk0    first-use with WEFT_CUDA_CHUNK_BYTES=0: every weft_malloc registers
#   launch_cost         launch-cost, weft's allocator as configured
#   reg_cost            BUILD_DIR/reg-cost (one process and its peer), if it was built
# Each runs under `timeout` with at most 240 s and never past the script's budget
# (GPUREG_BUDGET_S, default 225 s, so the whole script ends within 4 minutes); a step that would
# get less than 10 s is skipped. The ranks get WEFT_BACKEND=cuda, NCCL_NVLS_ENABLE=0 and
# WEFT_TIMEOUT_S=60 (a hang fails within a minute, before the timeout). MPS (if needed) is a daemon
# of the script's own (tools/mps.sh), stopped on exit, its logs in OUT_DIR/mps/mps.log.
# OUT_DIR/env.txt records the machine and the commands.
# The tables are printed last.
#
# Exit status: 0 if every step succeeded, 1 if one failed or timed out, 2 on a usage error,
# 77 when there is no GPU (no nvidia-smi, no device, or the programs say SKIP).
set -uo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
build=$(realpath -m "$1")
out=$(realpath -m "$2")
budget=${GPUREG_BUDGET_S:-225}
for exe in weftrun first-use launch-cost; do
    if [ ! -x "$build/$exe" ]; then
        echo "$0: $build/$exe is missing (build with CUDA first)" >&2
        exit 2
    fi
done
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA device (nvidia-smi finds none)"
    exit 77
fi
mkdir -p "$out"
start=$(date +%s)
ranks=${GPUREG_RANKS:-4}

# shellcheck source=tools/mps.sh
source "$(dirname "$0")/../tools/mps.sh"
ngpu=$(mps_gpus)
if [ "$ranks" -le "$ngpu" ]; then
    echo "# $ranks ranks on $ngpu GPUs: one rank per GPU, no MPS"
elif ! mps_start; then
    echo "$0: could not start the MPS control daemon" >&2
    mps_finish
    exit 1
else
    mkdir -p "$out/mps"
    trap 'mps_finish "$out/mps/mps.log"' EXIT
fi
trap 'exit 130' INT TERM HUP

export WEFT_BACKEND=cuda NCCL_NVLS_ENABLE=0 WEFT_TIMEOUT_S=60
{
    echo "date: $(date -Is)"
    echo "host: $(uname -n), $(uname -r), $(nproc) cores; $ranks ranks on $ngpu GPU(s)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "commit: $(git -C "$(dirname "$0")" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "RLIMIT_NOFILE: $(ulimit -Sn) soft, $(ulimit -Hn) hard"
    echo "environment: $(env | grep -E '^(WEFT_|NCCL_|CUDA_MPS_)' | grep -v '^WEFT_JOB_SECRET=' |
        sort | tr '\n' ' ')"
} >"$out/env.txt"

failed=0
skipped=0
names=()
# step NAME CMD...: run CMD (its output to OUT_DIR/NAME.log) under the remaining budget.
step() {
    local name=$1
    shift
    local left=$((budget - ($(date +%s) - start)))
    local limit=$((left < 240 ? left : 240))
    names+=("$name")
    echo "command: $*" >>"$out/env.txt"
    if [ "$limit" -lt 10 ]; then
        echo "# $name: skipped, ${left} s of the budget left" | tee "$out/$name.log"
        failed=1
        return
    fi
    echo "# $name: running (limit ${limit} s): $*"
    local t0 rc
    t0=$(date +%s)
    timeout -k 15 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "# $name: exit $rc after $(($(date +%s) - t0)) s" | tee -a "$out/$name.log"
    case $rc in
    0) ;;
    77) skipped=1 ;;
    124 | 137) echo "# $name: TIMED OUT" | tee -a "$out/$name.log"; failed=1 ;;
    *) failed=1 ;;
    esac
}

run=("$build/weftrun" -n "$ranks" --grace 5)
step first_use "${run[@]}" "$build/first-use" --tag "chunks=default" \
    --json "$out/first_use.json"
step first_use_busy "${run[@]}" "$build/first-use" --gap-kind busy --tag "chunks=default" \
    --json "$out/first_use_busy.json"
step launch_cost_chunk0 env WEFT_CUDA_CHUNK_BYTES=0 "${run[@]}" "$build/launch-cost" \
    --tag "WEFT_CUDA_CHUNK_BYTES=0" --json "$out/launch_cost_chunk0.json"
step first_use_chunk0 env WEFT_CUDA_CHUNK_BYTES=0 "${run[@]}" "$build/first-use" \
    --tag "WEFT_CUDA_CHUNK_BYTES=0" --json "$out/first_use_chunk0.json"
step launch_cost "${run[@]}" "$build/launch-cost" --tag "chunks=default" \
    --json "$out/launch_cost.json"
if [ -x "$build/reg-cost" ]; then
    step reg_cost "$build/reg-cost" --json "$out/reg_cost.json"
fi

echo
for name in "${names[@]}"; do
    echo "==================== $name ($out/$name.log)"
    cat "$out/$name.log"
    echo
done
echo "# bench/gpu_registration.sh: done in $(($(date +%s) - start)) s; results in $out"
if [ "$failed" -ne 0 ]; then
    exit 1
fi
if [ "$skipped" -ne 0 ]; then
    exit 77
fi
exit 0
