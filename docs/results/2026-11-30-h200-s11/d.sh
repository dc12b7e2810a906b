#!/bin/bash
# Session 11, device call D (2 x H200): working tree (ff84357 + push limit 1 MiB for two ranks on
# two GPUs, all-reduce 512 KiB): build with NCCL, unit tests, GPU suite on both GPUs (2/4 ranks),
# 2 ranks on one GPU, Python GPU tests, every collective weft vs NCCL 128K-2M (2 reps alternated).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/head.txt; git status --short >> $R/head.txt
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite 2 GPUs rc=$? ($(el))"
grep -v " PASS " $R/suite2/summary.txt | tail -3; grep -c " PASS " $R/suite2/summary.txt; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c
snap
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2" GPU_TEST_BUDGET_S=100 timeout 115 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1; echo "suite 1 GPU, 2 ranks rc=$? ($(el))"
grep -v " PASS " $R/suite1/summary.txt | tail -3; grep -c " PASS " $R/suite1/summary.txt
WEFT_BACKEND=cuda WEFT_LOG_LEVEL=info timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t barrier -n 2 -w 1 2>&1 | grep -m2 "CUDA backend" > $R/info.txt; cat $R/info.txt
snap
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 128K -e 2M -f 2 -n 40 -w 5 -c $c --json $R/w_weft_r$rep.json > $R/w_weft_r$rep.log 2>&1 || echo "FAIL weft rep $rep"
  WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 128K -e 2M -f 2 -n 40 -w 5 -c $c --json $R/w_nccl_r$rep.json > $R/w_nccl_r$rep.log 2>&1 || echo "FAIL nccl rep $rep"
done; echo "== weft vs nccl ($(el))"
snap
RUN_GPU_STEPS="pytest" timeout 240 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -4 $R/py.log
snap
echo "== done ($(el))"
