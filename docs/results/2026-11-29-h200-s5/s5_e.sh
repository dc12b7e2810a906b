#!/bin/bash
# Session 5, device call E (1 x H200): final check of main: CTest unit tests, the GPU suite at
# 2/4/8 ranks (memcheck and copy-engine runs included), the Python GPU tests and examples/tp_mlp.py,
# and one weft-bench -t all.
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
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=280 timeout 295 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 4 --grace 5 build-gpu/weft-bench -t all -b 8 -e 1M -f 32 -n 20 -w 2 > $R/bench_all.log 2>&1; echo "weft-bench all rc=$? wrong=$(grep -vE '^#' $R/bench_all.log | awk '$9 != 0 || ($13 != "" && $13 != 0)' | wc -l)"
echo quit | nvidia-cuda-mps-control
snap
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index --find-links scratch/wheels pytest > $R/pip.log 2>&1
left=$(( 570 - $(date +%s) + t0 ))
RUN_GPU_STEPS="pytest example" timeout $left bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -5 $R/py.log
grep -h "passed\|failed" $R/py/*.log | tail -3
snap
echo "== done ($(el))"
