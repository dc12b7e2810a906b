#!/bin/bash
# Session 24, call A (1 x H200): HEAD (the eight commits after session 23's last GPU call, and
# gpu_invalid's invalid-argument rows now reading both buffers back). CTest unit; the GPU suite
# (2/4/8 ranks under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1; git log -1 --format=%H > $R/head.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 120 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed|Skipped" $R/ctest_unit.log | head -8)
echo "== unit ($(el))"
snap
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=280 timeout 300 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1
echo "suite rc=$? ($(el))"; tail -1 $R/suite/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
grep -h "gpu_invalid" $R/suite/summary.txt | head -6
grep -c "after the rejected call" $R/suite/gpu-tests.log
snap; echo "== done ($(el))"
