#!/bin/bash
# Session 20, call C (2 x H200): gpu_late with 1 MiB per rank (beyond the push path), on both
# GPUs (one rank each) and on one GPU under MPS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
export WEFT_BACKEND=cuda NCCL_NVLS_ENABLE=0 WEFT_TIMEOUT_S=3
for v in all_reduce all_gather; do
  env $([ $v = all_gather ] && echo WEFT_CUDA_COPY_ENGINE=1) timeout 60 build-gpu/weftrun --grace 10 -n 2 -- build-gpu/tests/gpu/gpu_late $v > $R/late2_$v.log 2>&1
  echo "2 GPUs $v rc=$?: $(grep -hE '^(PASS|FAIL)' $R/late2_$v.log | cut -c1-140 | tr '\n' ' ')"
done
GPU_TEST_RANKS=2 GPU_TEST_BUDGET_S=60 GPU_TEST_NO_MEMCHECK=1 CUDA_VISIBLE_DEVICES=0 bash tests/gpu/run.sh build-gpu $R/one > $R/one.log 2>&1
grep gpu_late $R/one/summary.txt; tail -1 $R/one/summary.txt
tar czf $OUT/results.tgz -C /tmp res
