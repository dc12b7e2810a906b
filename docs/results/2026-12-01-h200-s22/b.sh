#!/bin/bash
# Session 22, call B (1 x H200): HEAD (the MoE data kernels guarded after a failed entry, peers'
# values bounds-checked; no store form on the copy engines). Build HEAD and 9b6a15d (before the
# MoE fixes) with HEAD's tests/gpu; gpu_late moe, 2 ranks under MPS, old and new (the other
# rank's gather must not run on the late rank's unwritten handle memory); CTest unit; the GPU
# suite on one GPU (2/4/8 ranks under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s22/old_moe.tgz -C /tmp/old && cp tests/gpu/*.c tests/gpu/*.h /tmp/old/tests/gpu/ &&
(cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j16 --target weftrun gpu_late > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
echo "== old build ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/b-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/b-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for tb in old:/tmp/old/b new:build-gpu; do
  tag=${tb%%:*}; b=${tb#*:}
  WEFT_BACKEND=cuda WEFT_TIMEOUT_S=3 timeout 90 $b/weftrun --grace 15 -n 2 -- $b/tests/gpu/gpu_late moe > $R/late_moe_$tag.log 2>&1
  echo "gpu_late moe $tag rc=$?: $(grep -hE '^(PASS|FAIL)' $R/late_moe_$tag.log | cut -c1-240 | sort | uniq -c | tr '\n' ' ')"
done
echo quit | nvidia-cuda-mps-control; sleep 1
snap
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=420 timeout 440 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite1/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c
snap; echo "== done ($(el))"
