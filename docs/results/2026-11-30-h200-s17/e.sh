#!/bin/bash
# Session 17, call E (2 x H200): gpu_registration after its other-thread case does its own copies on
# the stream's device (call D: the runtime refused them, cudaErrorInvalidValue), 2 and 4 ranks on both GPUs.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weftrun gpu_collectives gpu_graph gpu_registration gpu_invalid gpu_moe gpu_fault > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
GPU_TEST_ONLY=gpu_registration GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=90 timeout 110 bash tests/gpu/run.sh build-gpu $R/reg > $R/reg.log 2>&1
echo "run.sh rc=$? ($(el))"; tail -1 $R/reg/summary.txt; grep -h "other thread\|another device" $R/reg/gpu-tests.log | head -6
tar czf $OUT/results.tgz -C /tmp res 2>/dev/null
