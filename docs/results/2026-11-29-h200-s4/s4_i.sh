#!/bin/bash
# Session 4, call I (1 x H200): GPU unit tests after the shared check.h, GPU suite at 2 ranks.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 120 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Skipped|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2" GPU_TEST_BUDGET_S=150 timeout 160 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
tail -1 $R/suite/summary.txt
tar czf $OUT/results.tgz -C /tmp res
