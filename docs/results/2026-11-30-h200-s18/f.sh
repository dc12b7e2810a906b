#!/bin/bash
# Session 18, call F (1 x H200): gpu_collectives' new first case (the communicator's first mesh
# all-reduce with the last rank's input 30 ms late on its stream) from operation numbers where
# 32-bit flags break, against the kernels of before (scratch/s18/old) and of now; then the GPU
# suite at 2 and 4 ranks.
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
(cmake -S /tmp/old -B /tmp/old/build -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/build -j6 --target weftrun gpu_collectives > $R/build_old.log 2>&1) &
wait
ls build-gpu/tests/gpu/gpu_collectives /tmp/old/build/tests/gpu/gpu_collectives > /dev/null || { tail -30 $R/build.log $R/build_old.log; snap; exit 1; }
echo "== builds ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe_f CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log_f
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for v in old new; do
  [ $v = old ] && B=/tmp/old/build || B=build-gpu
  for s in 2147483656 4294967288; do
    env WEFT_TIMEOUT_S=10 WEFT_CUDA_SEQ_START=$s WEFT_CUDA_CHUNK_BYTES=64M GPU_TEST_QUICK=1 timeout 90 $B/weftrun --grace 5 -n 2 -- $B/tests/gpu/gpu_collectives > $R/${v}_$s.log 2>&1
    echo "$v: gpu_collectives (quick) from $s rc=$? FAIL lines $(grep -c '^FAIL' $R/${v}_$s.log)"; grep -m1 '^FAIL' $R/${v}_$s.log | cut -c1-260; grep '^PASS' $R/${v}_$s.log | head -1
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1; snap
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1
echo "suite rc=$? ($(el))"; tail -1 $R/suite/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED\|operation" $R/suite/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c; snap
echo "== done ($(el))"
