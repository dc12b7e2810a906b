#!/bin/bash
# Session 10, device call F (2 x H200): working tree (45a5b39 + GPU identity by UUID + two-shot
# defaults by topology + run.sh honouring CUDA_VISIBLE_DEVICES): build, unit tests, GPU suite on
# two GPUs (2/4 ranks) and on one of them (CUDA_VISIBLE_DEVICES=0, 2/4/8 ranks under MPS), a
# per-rank CUDA_VISIBLE_DEVICES run, all-reduce at the new defaults.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite 2 GPUs rc=$? ($(el))"
grep -v " PASS " $R/suite2/summary.txt | tail -3; grep -c " PASS " $R/suite2/summary.txt; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; grep -m2 "ranks on" $R/suite2/gpu-tests.log
snap
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1; echo "suite 1 GPU rc=$? ($(el))"
grep -v " PASS " $R/suite1/summary.txt | tail -3; grep -c " PASS " $R/suite1/summary.txt; grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c; grep -m1 "ranks on" $R/suite1/gpu-tests.log; grep "MPS\|one rank per GPU" $R/suite1.log | head -2
snap
WEFT_BACKEND=cuda WEFT_LOG_LEVEL=info GPU_TEST_QUICK=1 timeout 120 build-gpu/weftrun -n 2 -- sh -c 'CUDA_VISIBLE_DEVICES=$LOCAL_RANK exec build-gpu/tests/gpu/gpu_collectives' > $R/visible_per_rank.log 2>&1; echo "per-rank CUDA_VISIBLE_DEVICES gpu_collectives rc=$?"
grep -E "CUDA backend:|ranks on|passed|FAIL" $R/visible_per_rank.log | head -6
for n in 2 4; do
  [ $n = 4 ] && { export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log; nvidia-cuda-mps-control -d; }
  WEFT_BACKEND=cuda timeout 120 build-gpu/weftrun -n $n build-gpu/weft-bench -t all_reduce -b 128K -e 16M -f 2 -n 30 -w 5 --json $R/ar_default_n$n.json > $R/ar_default_n$n.log 2>&1 || echo "FAIL default n=$n"
done
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
