#!/usr/bin/env bash
# run_gpu.sh - the Python package on a GPU machine (PyTorch with CUDA, pytest, numpy installed).
#
#   python/tests/run_gpu.sh BUILD_DIR [OUT_DIR]
#
# BUILD_DIR is a CMake build of weft with the CUDA backend (libweft.so and weftrun in it). The
# package is used from the source tree (python/) with WEFT_LIBRARY=BUILD_DIR/libweft.so.
#
# 1. Starts an MPS control daemon of its own (fresh CUDA_MPS_PIPE_DIRECTORY and
#    CUDA_MPS_LOG_DIRECTORY under /tmp), so that ranks sharing a GPU run at the same time; it is
#    stopped on exit (`echo quit | nvidia-cuda-mps-control`).
# 2. pytest over python/tests: the GPU cases (test_gpu.py: staged, pool and process-wide
#    allocator tensors, graph capture and replay, first-use waits, errors) with 2 and 4 ranks
#    (WEFT_GPU_TEST_RANKS), and the host and CPU-tensor suites. WEFT_REQUIRE_GPU=1 makes
#    test_gpu.py fail where it would skip (no torch, or no CUDA device visible inside pytest).
# 3. examples/tp_mlp.py on the CUDA backend with 2 and 4 ranks (every rank must print
#    "PASS tp_mlp rank=R").
# 4. `pip install --no-build-isolation --no-deps` of python/ into a temporary directory (the
#    machine has no network: the build tools come from the installed Python), then a 2-rank
#    all-reduce with the installed package and its own weftrun, WEFT_LIBRARY unset.
# RUN_GPU_STEPS picks steps (default "pytest example pip"), to split a run over several calls.
# Each step prints "PASS <step>" or "FAIL <step>" (with the tail of its output); the summary is
# last, and the exit status is 0 only if every step passed. OUT_DIR (default
# BUILD_DIR/python-gpu-logs) gets one log per step and mps.log.
#
# Every run keeps NVLink multicast off (NCCL_NVLS_ENABLE=0).
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 BUILD_DIR [OUT_DIR]" >&2
    exit 2
fi
build=$(cd "$1" && pwd) || exit 2
out=${2:-$build/python-gpu-logs}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}

for f in "$build/libweft.so" "$build/weftrun"; do
    if [ ! -e "$f" ]; then
        echo "$0: $f is missing: build weft with CMake first" >&2
        exit 2
    fi
done
if ! "$python" -c 'import torch, pytest, numpy; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "$0: $python needs torch with a CUDA device, pytest and numpy" >&2
    exit 2
fi

export WEFT_LIBRARY=$build/libweft.so WEFT_WEFTRUN=$build/weftrun
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
results=()
failures=0

# step NAME TIMEOUT_S CMD...: run CMD, log it, record PASS or FAIL (exit status 0 or not).
step() {
    local name=$1 limit=$2
    shift 2
    local log
    log="$out/$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    echo "run_gpu.sh: $name ..."
    local t0=$SECONDS
    # bash -c: CMD may be one of the functions below (exported).
    { echo "\$ $*"; timeout -k 10 "$limit" bash -c '"$@"' step "$@"; } >"$log" 2>&1
    local rc=$?
    local secs=$((SECONDS - t0))
    if [ "$rc" -eq 0 ]; then
        echo "PASS $name ($secs s)"
        results+=("PASS $name ($secs s)")
    else
        echo "FAIL $name (exit status $rc, $secs s; log $log)"
        tail -n 40 "$log" | sed 's/^/    | /'
        results+=("FAIL $name (exit status $rc)")
        failures=$((failures + 1))
    fi
}

# tp_mlp N: the example on N ranks; passes when every rank printed its PASS line.
tp_mlp() {
    local n=$1 tmp
    tmp=$(mktemp)
    WEFT_BACKEND=cuda PYTHONPATH="$repo/python" "$WEFT_WEFTRUN" --grace 15 -n "$n" \
        "$python" "$repo/examples/tp_mlp.py" >"$tmp" 2>&1
    local rc=$?
    cat "$tmp"
    local passes
    passes=$(grep -c "^PASS tp_mlp rank=" "$tmp")
    rm -f "$tmp"
    [ "$rc" -eq 0 ] && [ "$passes" -eq "$n" ]
}

# pip_install: build and install the package offline, then run 2 ranks with it alone.
pip_install() {
    local target rc
    target=$(mktemp -d /tmp/weft-pip.XXXXXX) || return 1
    (
        set -e
        cp -r "$repo/python" "$target/src-python"
        rm -rf "$target/src-python/build" "$target/src-python"/*.egg-info
        WEFT_SOURCE_DIR=$repo "$python" -m pip install --no-build-isolation --no-deps \
            --no-cache-dir --target "$target/site" "$target/src-python"
        cd "$target"
        env -u WEFT_LIBRARY -u WEFT_WEFTRUN PYTHONPATH="$target/site" WEFT_BACKEND=cuda \
            "$python" -c 'import weft, sys; print(weft.library_path()); sys.exit(0 if
weft.library_path().startswith(sys.argv[1]) else 1)' "$target/site"
        env -u WEFT_LIBRARY -u WEFT_WEFTRUN PYTHONPATH="$target/site" WEFT_BACKEND=cuda \
            "$target/site/weft/weftrun" -n 2 "$python" -c '
import torch, weft, weft.torch
with weft.init() as comm:
    torch.cuda.set_device(comm.device)
    pool = weft.torch.mem_pool(comm)
    with torch.cuda.use_mem_pool(pool):
        t = torch.full((1 << 20,), float(comm.rank + 1), device="cuda")
    comm.all_reduce(t)
    torch.cuda.synchronize()
    assert bool((t == 3.0).all()), t[:4]
    print("rank", comm.rank, "stats", comm.stats())
    del t, pool
'
    )
    rc=$?
    rm -rf "$target"
    return "$rc"
}

export repo python
export -f tp_mlp pip_install

# shellcheck source=tools/mps.sh
source "$repo/tools/mps.sh"
cleanup() {
    mps_finish "$out/mps.log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

echo "run_gpu.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), build $build, logs in $out"
nvidia-smi -L || true
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"devices", torch.cuda.device_count())'
if ! mps_start; then
    echo "FAIL MPS (nvidia-cuda-mps-control -d)"
    exit 1
fi

steps=" ${RUN_GPU_STEPS:-pytest example pip} "
if [[ "$steps" == *" pytest "* ]]; then
    # WEFT_REQUIRE_GPU=1: test_gpu.py fails, rather than skips, without torch or a CUDA device.
    step "pytest python/tests (GPU cases on 2 and 4 ranks)" 420 \
        env WEFT_REQUIRE_GPU=1 WEFT_GPU_TEST_RANKS="${WEFT_GPU_TEST_RANKS:-2 4}" "$python" -m \
        pytest -q -rs -p no:cacheprovider "$repo/python/tests"
fi
if [[ "$steps" == *" example "* ]]; then
    for n in 2 4; do
        step "examples/tp_mlp.py CUDA n=$n" 240 tp_mlp "$n"
    done
fi
if [[ "$steps" == *" pip "* ]]; then
    step "pip install --no-build-isolation, then 2 ranks" 400 pip_install
fi

echo
echo "run_gpu.sh: summary"
printf '%s\n' "${results[@]}"
if [ "$failures" -ne 0 ]; then
    echo "run_gpu.sh: $failures step(s) failed"
    exit 1
fi
echo "run_gpu.sh: all steps passed"
exit 0
