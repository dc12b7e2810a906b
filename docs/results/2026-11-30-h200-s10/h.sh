#!/bin/bash
# Session 10, device call H (2 x H200): the push path's limit across two GPUs: every collective,
# 16K-1M, 2 ranks, WEFT_CUDA_PUSH_BYTES=64K (default) vs 1M, alternated twice; 4 ranks once.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weft-bench weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
for rep in 1 2; do for P in 64K 1M; do
  c=0; [ $rep = 1 ] && c=1
  WEFT_CUDA_PUSH_BYTES=$P timeout 100 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 16K -e 1M -f 4 -n 40 -w 5 -c $c --json $R/push_n2_${P}_r$rep.json > $R/push_n2_${P}_r$rep.log 2>&1 || echo "FAIL n=2 $P rep $rep"
done; done; echo "== n=2 ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log; nvidia-cuda-mps-control -d
for P in 64K 1M; do
  WEFT_CUDA_PUSH_BYTES=$P timeout 100 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all -b 16K -e 1M -f 4 -n 40 -w 5 -c 1 --json $R/push_n4_${P}_r1.json > $R/push_n4_${P}_r1.log 2>&1 || echo "FAIL n=4 $P"
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
