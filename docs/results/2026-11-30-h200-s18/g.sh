#!/bin/bash
# Session 18, call G (1 x H200): call F again with the late input written by a device-to-device
# copy after the host callback (F's copy from pageable memory held the host as well, and the host
# handshake then ordered the ranks); gpu_collectives (quick) at 2 and 4 ranks without a start.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
rm -rf /tmp/old && mkdir /tmp/old && tar cf - --exclude=./build-gpu --exclude=./.git . | tar xf - -C /tmp/old
cp scratch/s18/old/exec_cuda.cu scratch/s18/old/exec_cuda.h scratch/s18/old/moe_cuda.cu /tmp/old/src/exec/
cp scratch/s18/old/comm_cuda.c /tmp/old/src/core/
(cmake -S . -B build-gpu -DWEFT_CUDA=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j8 --target weftrun gpu_collectives > $R/build.log 2>&1) &
(cmake -S /tmp/old -B /tmp/old/build -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/build -j8 --target weftrun gpu_collectives > $R/build_old.log 2>&1) &
wait
ls build-gpu/tests/gpu/gpu_collectives /tmp/old/build/tests/gpu/gpu_collectives > /dev/null || { tail -30 $R/build.log $R/build_old.log; snap; exit 1; }
echo "== builds ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe_g CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log_g
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
run() { # name build ranks start
  env WEFT_TIMEOUT_S=10 WEFT_CUDA_SEQ_START=$4 WEFT_CUDA_CHUNK_BYTES=64M GPU_TEST_QUICK=1 timeout 90 $2/weftrun --grace 5 -n $3 -- $2/tests/gpu/gpu_collectives > $R/$1.log 2>&1
  echo "$1: rc=$? FAIL lines $(grep -c '^FAIL' $R/$1.log) $(grep -m1 '^PASS' $R/$1.log)"; grep -m1 '^FAIL' $R/$1.log | cut -c1-300
}
for s in 2147483656 4294967288; do run old_$s /tmp/old/build 2 $s; run new_$s build-gpu 2 $s; done
run new_n2 build-gpu 2 0; run new_n4 build-gpu 4 0
echo quit | nvidia-cuda-mps-control; snap
echo "== done ($(el))"
