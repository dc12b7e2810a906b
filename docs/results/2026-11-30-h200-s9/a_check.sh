#!/bin/bash
# Session 9, device call A (1 x H200): check of HEAD (02d1403: sm_blocks / copy_engine_ops stats,
# weft-bench blocks column, push-path fence): unit tests, GPU suite 2/4/8 (copy-engine run
# included), weft-bench blocks with the copy engine off and on, Python GPU tests.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for ce in 0 1; do
  for coll in all_gather all_reduce; do
    WEFT_BACKEND=cuda WEFT_CUDA_COPY_ENGINE=$ce timeout 60 build-gpu/weftrun -n 4 build-gpu/weft-bench -t $coll -b 8 -e 64M -f 8 -n 20 -w 3 --json $R/wb_ce${ce}_$coll.json > $R/wb_ce${ce}_$coll.log 2>&1; echo "weft-bench ce=$ce $coll rc=$?"
    grep -E "^ +[0-9]" $R/wb_ce${ce}_$coll.log | cut -c1-150
    grep "copy-engine operations" $R/wb_ce${ce}_$coll.log
  done
done
WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m roa,jit -s 64K,256M -g 10 -r 3 > $R/first_use.log 2>&1; echo "first-use rc=$?"
grep -E "^ *(roa|jit) " $R/first_use.log | cut -c1-150
echo quit | nvidia-cuda-mps-control
snap
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index --find-links scratch/wheels pytest > $R/pip.log 2>&1
left=$(( 570 - $(date +%s) + t0 ))
RUN_GPU_STEPS="pytest example" timeout $left bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -5 $R/py.log
snap
echo "== done ($(el))"
