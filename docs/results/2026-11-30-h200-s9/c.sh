#!/bin/bash
# Session 9, device call C (1 x H200): HEAD after the weft-calibrate split and the GPU suite's
# WEFT_CUDA_MAX_BLOCKS bound: build, unit tests, GPU suite 2/4 (the 3-block run included),
# weft-calibrate on 4 ranks under MPS (2 repeats, volumes up to 16 MiB) against the 2026-11-29 numbers.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=240 timeout 255 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt; grep "3 blocks" $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
WEFT_BACKEND=cuda timeout 240 build-gpu/weftrun -n 4 --grace 5 build-gpu/weft-calibrate -r 2 -V 16M --json $R/calibrate_4r.json > $R/calibrate_4r.log 2>&1; echo "weft-calibrate rc=$? ($(el))"
grep -E "drain_gbps|^oneway +(1|8|32) t_iss0|held|median" $R/calibrate_4r.log | head -20
echo quit | nvidia-cuda-mps-control
gzip -f $R/calibrate_4r.json
snap
echo "== done ($(el))"
