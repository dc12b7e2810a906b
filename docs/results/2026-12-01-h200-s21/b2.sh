#!/bin/bash
# Session 21, call B2 (one of the 2 H200s, CUDA_VISIBLE_DEVICES=0): the GPU suite with 2/4/8
# ranks under MPS (memcheck included) on B1's build of HEAD.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res2; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
{ [ -f build-gpu/CMakeCache.txt ] || cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1; } && cmake --build build-gpu -j32 > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=340 timeout 355 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite1/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c
tar czf $OUT/results.tgz -C /tmp res2; echo "== done ($(el))"
