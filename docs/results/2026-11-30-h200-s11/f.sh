#!/bin/bash
# Session 11, device call F (1 x H200): HEAD 7b4e2ec: build, unit tests, GPU suite 2/4/8 ranks
# under MPS (the harness's push limits per collective on one GPU).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/head.txt; cat $R/head.txt
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=300 timeout 320 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -3; grep -c " PASS " $R/suite/summary.txt; grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
cp $R/suite/summary.txt $R/suite_summary.txt
tar czf $OUT/results.tgz -C /tmp res/head.txt res/suite_summary.txt res/ctest_unit.log
echo "== done ($(el))"
