#!/bin/bash
# Session 10, device call C (1 x H200): first-use with its launch control (working tree on
# d1097ec + bench/first_use.c): roa 64K/16M, gaps 10/100 ms, sleep/spin/busy, 4 ranks under MPS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target first-use weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for k in sleep spin busy; do
  WEFT_BACKEND=cuda timeout 150 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 9 --gap-kind $k --json $R/first_use_$k.json > $R/first_use_$k.log 2>&1; echo "first-use $k rc=$? ($(el))"
  grep -v "^#" $R/first_use_$k.log
done
echo quit | nvidia-cuda-mps-control
head -12 $R/first_use_sleep.log | grep "^#" | tail -3
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
