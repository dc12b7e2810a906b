#!/bin/bash
# Session 22, call D (1 x H200): HEAD after the review of the session's change (the MoE combine's
# bound on a peer's received rows, the kernels' shared failure helpers, weft-calibrate's rows
# fitted after its checks): CTest unit; the GPU suite (2/4/8 ranks under MPS, memcheck); the
# Python GPU step; weft-calibrate at its defaults (2 ranks, MPS).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=300 timeout 310 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite1/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c
snap
timeout 230 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python gpu rc=$? ($(el))"; tail -2 $R/py.log; grep -h " passed" $R/py/*.log | tail -2
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/d-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/d-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 2 --grace 5 build-gpu/weft-calibrate -r 1 --json $R/calibrate.json > $R/calibrate.log 2>&1
echo "weft-calibrate rc=$? ($(el))"; grep -E "drain_gbps|not checked" $R/calibrate.log | head -8
echo quit | nvidia-cuda-mps-control
snap; echo "== done ($(el))"
