#!/bin/bash
# Session 11, device call A (2 x H200): HEAD ff84357 (first GPU run of 4a86a54 and ff84357):
# build with NCCL, unit tests, GPU suite on two GPUs (2/4 ranks) and on one of them
# (CUDA_VISIBLE_DEVICES=0, 2/4/8 ranks under MPS), a short first-use on one GPU (4 ranks, MPS).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/head.txt; cat $R/head.txt
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite 2 GPUs rc=$? ($(el))"
grep -v " PASS " $R/suite2/summary.txt | tail -3; grep -c " PASS " $R/suite2/summary.txt; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; grep -m1 "ranks on" $R/suite2/gpu-tests.log
snap
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1; echo "suite 1 GPU rc=$? ($(el))"
grep -v " PASS " $R/suite1/summary.txt | tail -3; grep -c " PASS " $R/suite1/summary.txt; grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c; grep -m1 "ranks on" $R/suite1/gpu-tests.log
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log
CUDA_VISIBLE_DEVICES=0 nvidia-cuda-mps-control -d
CUDA_VISIBLE_DEVICES=0 WEFT_BACKEND=cuda timeout 100 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 7 --json $R/first_use.json > $R/first_use.log 2>&1; echo "first-use rc=$? ($(el))"
grep -v "^#" $R/first_use.log
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
