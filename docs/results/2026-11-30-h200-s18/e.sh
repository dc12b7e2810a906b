#!/bin/bash
# Session 18, call E (1 x H200): main after the 64-bit device flags, the push slots flagged after
# the agreement, launches reporting their own status, and the registry's chunk fallback: build,
# CTest unit, GPU suite on one GPU (2/4/8 under MPS, memcheck, the new runs from operation
# 0x01010100 and 2^32 - 8). Then the same new runs and gpu_invalid against the kernels of before
# (scratch/s18/old: exec_cuda.*, moe_cuda.cu of 5bc9cfd; comm_cuda.c of 5bc9cfd plus the
# WEFT_CUDA_SEQ_START hook), which must fail.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
rm -rf /tmp/old && mkdir /tmp/old && tar cf - --exclude=./build-gpu --exclude=./.git . | tar xf - -C /tmp/old
cp scratch/s18/old/exec_cuda.cu scratch/s18/old/exec_cuda.h scratch/s18/old/moe_cuda.cu /tmp/old/src/exec/
cp scratch/s18/old/comm_cuda.c /tmp/old/src/core/
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j12 > $R/build.log 2>&1) & 
(cmake -S /tmp/old -B /tmp/old/build -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/build -j6 --target weftrun gpu_collectives gpu_graph gpu_invalid > $R/build_old.log 2>&1) &
wait
ls build-gpu/tests/gpu/gpu_collectives /tmp/old/build/tests/gpu/gpu_collectives > /dev/null || { tail -30 $R/build.log $R/build_old.log; snap; exit 1; }
echo "== builds ok ($(el))"
(cd build-gpu && timeout 120 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=250 timeout 265 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED\|operation" $R/suite1/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c; snap
# The kernels of before, 2 ranks under MPS.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe_old CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log_old
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
O=/tmp/old/build
for start in 16843008 4294967288; do for p in gpu_collectives gpu_graph; do
  env WEFT_TIMEOUT_S=10 WEFT_CUDA_SEQ_START=$start WEFT_CUDA_CHUNK_BYTES=64M timeout 60 $O/weftrun --grace 5 -n 2 -- $O/tests/gpu/$p > $R/old_${p}_$start.log 2>&1
  echo "before: $p from $start rc=$? FAIL lines $(grep -c '^FAIL' $R/old_${p}_$start.log)"; grep -m2 '^FAIL' $R/old_${p}_$start.log | cut -c1-300
done; done
env WEFT_TIMEOUT_S=10 timeout 60 $O/weftrun --grace 5 -n 2 -- $O/tests/gpu/gpu_invalid > $R/old_gpu_invalid.log 2>&1
echo "before: gpu_invalid rc=$? FAIL lines $(grep -c '^FAIL' $R/old_gpu_invalid.log)"; grep -m2 '^FAIL' $R/old_gpu_invalid.log | cut -c1-300
echo quit | nvidia-cuda-mps-control; snap
echo "== done ($(el))"
