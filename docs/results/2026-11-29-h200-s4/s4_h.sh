#!/bin/bash
# Session 4, call H (1 x H200): final check of main after the merges: GPU suite (2/4/8 ranks,
# copy-engine run, memcheck) and a short run of every GPU benchmark program.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -3 $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
W="build-gpu/weftrun -n 4 --grace 5"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
b=build-gpu
timeout 60 $W $b/first-use -m roa,jit -s 64K,16M -g 10 -r 3 -n 10 --gap-kind spin > $R/first_use.log 2>&1; echo "first-use rc=$?"
timeout 60 $W $b/moe-bench -T 1024 -n 5 -w 2 > $R/moe.log 2>&1; echo "moe-bench rc=$?"
timeout 90 $W $b/launch-cost -k 2000 -b 100 > $R/launch.log 2>&1; echo "launch-cost rc=$?"
timeout 90 $W $b/weft-calibrate -r 1 -b 6 -V 1M > $R/calib.log 2>&1; echo "weft-calibrate rc=$?"
timeout 60 $W $b/weft-bench -t all -b 8 -e 1M -f 32 -n 10 -w 2 > $R/bench_all.log 2>&1; echo "weft-bench all rc=$?"
echo quit | nvidia-cuda-mps-control
timeout 60 $b/reg-cost -b 2M -e 32M -n 3 -k 16 > $R/reg.log 2>&1; echo "reg-cost rc=$?"
snap
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index --find-links scratch/wheels pytest > $R/pip.log 2>&1
left=$(( 560 - $(date +%s) + t0 ))
RUN_GPU_STEPS="pytest example" PYTEST_ADDOPTS="-k 'torch-cuda-global or moe or wrong_device or graph'" timeout $left bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -4 $R/py.log
snap
grep -vE "^#" $R/first_use.log | head -5; tail -4 $R/moe.log; tail -4 $R/launch.log; tail -3 $R/calib.log; tail -3 $R/reg.log
grep -c " 0$" $R/bench_all.log
echo "== done ($(el))"
