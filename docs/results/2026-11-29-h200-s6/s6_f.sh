#!/bin/bash
# Session 6, device call F (1 x H200): check of HEAD after the fill_work change (5e38aaa):
# gpu_collectives and gpu_graph at 2 and 4 ranks under MPS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target weftrun gpu_collectives gpu_graph > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=30 NCCL_NVLS_ENABLE=0
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for n in 2 4; do for p in gpu_collectives gpu_graph; do
  timeout 60 build-gpu/weftrun -n $n build-gpu/tests/gpu/$p > $R/${p}_$n.log 2>&1; echo "$p n=$n rc=$? $(grep -c '^FAIL' $R/${p}_$n.log) FAIL lines, $(grep -c '^PASS' $R/${p}_$n.log) PASS lines ($(el))"
done; done
echo quit | nvidia-cuda-mps-control
snap
