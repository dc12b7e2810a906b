#!/bin/bash
# Session 8, device call F (2 x H200): where does the ~1 ms of weft's 64 KiB call after a 100 ms
# idle gap on two GPUs come from? push path on/off, gaps 10..100 ms, sleep/spin, NCCL beside.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target first-use-nccl weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
nvidia-smi nvlink -s > $R/nvlink_state.txt 2>&1; head -5 $R/nvlink_state.txt
export WEFT_BACKEND=cuda
FU="build-gpu/weftrun -n 2 --grace 5 build-gpu/first-use-nccl -s 64K -g 10,20,30,50,70,100 -r 7"
for push in 64K 0; do for kind in sleep spin; do
  WEFT_CUDA_PUSH_BYTES=$push timeout 90 $FU -m roa,nccl --gap-kind $kind > $R/f_push${push}_$kind.log 2>&1; echo "push=$push $kind rc=$? ($(el))"
  grep -E "^ *(roa|nccl) " $R/f_push${push}_$kind.log | cut -c1-150
done; done
snap
echo "== done ($(el))"
