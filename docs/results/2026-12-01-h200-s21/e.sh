#!/bin/bash
# Session 21, call E (1 x H200): weft-bench's verification after cddbca3/07a6459 (the inputs-
# unchanged check over a send-buffer image, two poison passes for one-byte dtypes) on the CUDA
# backend: every collective, both placements, float, uint8 and bfloat16, 2 ranks under MPS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target weftrun weft-bench > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/e-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/e-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for d in float uint8 bfloat16; do
  timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -b 8 -e 4M -f 8 -n 10 -w 2 -d $d > $R/all_$d.log 2>&1
  echo "$d rc=$?: $(grep -c '^ ' $R/all_$d.log) rows, $(grep 'Out of bounds' $R/all_$d.log)"
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/results.tgz -C /tmp res; echo "== done ($(el))"
