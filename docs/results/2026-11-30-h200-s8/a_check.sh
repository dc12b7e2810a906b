#!/bin/bash
# Session 7, device call A (1 x H200): check of HEAD (window agreement by address-space
# intersection): GPU unit tests, suite 2/4/8, first-use 64K/16M roa|jit|staged, Python GPU tests.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -3 $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
GPU_TEST_QUICK=1 WEFT_LOG_LEVEL=debug WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 4 build-gpu/tests/gpu/gpu_collectives > $R/window_debug.log 2>&1; echo "window debug rc=$?"; grep -h "window at" $R/window_debug.log | head -4
for kind in sleep busy; do
  WEFT_BACKEND=cuda timeout 90 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m roa,jit,staged -s 64K,16M -g 0,1,10,100 -r 5 --gap-kind $kind > $R/first_use_$kind.log 2>&1; echo "first-use $kind rc=$? ($(el))"
done
echo quit | nvidia-cuda-mps-control
grep -hvE "^# (times|buffer|of the|ranks, med|h_first|first-use)" $R/first_use_*.log | cut -c1-190
snap
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index --find-links scratch/wheels pytest > $R/pip.log 2>&1
left=$(( 570 - $(date +%s) + t0 ))
RUN_GPU_STEPS="pytest example" timeout $left bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -5 $R/py.log
snap
echo "== done ($(el))"
