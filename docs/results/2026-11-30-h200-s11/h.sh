#!/bin/bash
# Session 11, device call H (2 x H200): working tree (2a07f45 + all_to_allv on the push path):
# build with NCCL, unit tests, GPU suite on both GPUs (2/4 ranks) and on one (2/4/8 ranks, MPS);
# all_to_allv weft (push) vs weft mesh (WEFT_CUDA_PUSH_BYTES=0) vs NCCL, 2 ranks on 2 GPUs and
# 4 ranks on one GPU (weft only), two reps alternated.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=150 timeout 165 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite 2 GPUs rc=$? ($(el))"
grep -v " PASS " $R/suite2/summary.txt | tail -4; grep -c " PASS " $R/suite2/summary.txt; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; grep -h -m3 "FAIL\|expected" $R/suite2/gpu-tests.log
snap
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1; echo "suite 1 GPU rc=$? ($(el))"
grep -v " PASS " $R/suite1/summary.txt | tail -4; grep -c " PASS " $R/suite1/summary.txt; grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c; grep -h -m3 "FAIL\|expected" $R/suite1/gpu-tests.log
snap
export WEFT_BACKEND=cuda
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  timeout 40 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_to_allv -b 4K -e 2M -f 4 -n 40 -w 5 -c $c --json $R/v2_push_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL push rep $rep"
  WEFT_CUDA_PUSH_BYTES=0 timeout 40 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_to_allv -b 4K -e 2M -f 4 -n 40 -w 5 -c $c --json $R/v2_mesh_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL mesh rep $rep"
  timeout 40 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all_to_allv -b 4K -e 2M -f 4 -n 40 -w 5 -c $c --json $R/v2_nccl_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL nccl rep $rep"
done; echo "== 2 GPUs ($(el))"
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log
CUDA_VISIBLE_DEVICES=0 nvidia-cuda-mps-control -d
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  CUDA_VISIBLE_DEVICES=0 timeout 40 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_to_allv -b 1K -e 256K -f 4 -n 40 -w 5 -c $c --json $R/v4_push_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL n4 push rep $rep"
  CUDA_VISIBLE_DEVICES=0 WEFT_CUDA_PUSH_BYTES=0 timeout 40 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_to_allv -b 1K -e 256K -f 4 -n 40 -w 5 -c $c --json $R/v4_mesh_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL n4 mesh rep $rep"
done; echo "== 1 GPU ($(el))"
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
