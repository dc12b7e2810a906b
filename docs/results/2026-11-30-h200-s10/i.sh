#!/bin/bash
# Session 10, device call I (2 x H200): WEFT_CUDA_PUSH_BYTES=auto (256 KiB for two ranks on two
# GPUs) and "auto" byte values: build, unit tests, GPU suite on both GPUs (2/4 ranks),
# gpu_collectives with 2 ranks on one GPU (regions sized for 256 KiB, limit 64 KiB), every
# collective 16K-1M at auto against 64K.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=150 timeout 160 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite 2 GPUs rc=$? ($(el))"
grep -v " PASS " $R/suite2/summary.txt | tail -3; grep -c " PASS " $R/suite2/summary.txt; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c
snap
CUDA_VISIBLE_DEVICES=0 GPU_TEST_ONLY=gpu_collectives GPU_TEST_RANKS=2 GPU_TEST_BUDGET_S=60 timeout 70 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1; echo "gpu_collectives 2 ranks one GPU rc=$? ($(el))"; tail -4 $R/suite1/summary.txt
for P in auto 64K; do
  WEFT_BACKEND=cuda WEFT_LOG_LEVEL=info WEFT_CUDA_PUSH_BYTES=$P timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 16K -e 1M -f 4 -n 40 -w 5 --json $R/push_$P.json > $R/push_$P.log 2>&1 || echo "FAIL bench $P"
  grep -m1 "push path up to" $R/push_$P.log
done
snap
echo "== done ($(el))"
