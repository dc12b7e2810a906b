#!/bin/bash
# Session 6, device call E (2 x H200): the one-shot/two-shot all-reduce crossover with the store
# form: 4 ranks on one GPU and on two GPUs, two-shot forced from 256 KiB against one-shot forced
# up to 64 MiB, in and out of place.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weft-bench weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60 NCCL_NVLS_ENABLE=0
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for g in 1 2; do
  vis=0; [ $g = 2 ] && vis=0,1
  for f in two one; do
    t=256K; [ $f = one ] && t=64M
    CUDA_VISIBLE_DEVICES=$vis WEFT_ALLREDUCE_TWOSHOT_BYTES=$t WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES=$t timeout 40 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_reduce -b 256K -e 4M -f 2 -n 30 -w 5 > $R/x${g}_$f.log 2>&1 || echo "x$g $f rc=$?"
  done
done
echo quit | nvidia-cuda-mps-control
for g in 1 2; do
  echo "# 4 ranks on $g GPU(s): size | out of place: one-shot two-shot | in place: one-shot two-shot | wrong"
  paste <(grep -vE '^#' $R/x${g}_one.log | awk 'NF>8{print $1, $6, $10, $9+$13}') <(grep -vE '^#' $R/x${g}_two.log | awk 'NF>8{print $6, $10, $9+$13}') | awk '{printf "%10d | %7.1f %7.1f | %7.1f %7.1f | %d\n", $1, $2, $5, $3, $6, $4+$7}'
done
snap
echo "== done ($(el))"
