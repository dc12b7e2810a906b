#!/bin/bash
# Session 11, device call I (1 x H200): working tree (all_to_allv push, fixed: every rank
# launches with the largest block of all ranks): gpu_collectives 2/4/8 ranks and 2 ranks on 3
# blocks under MPS; all_to_allv push vs mesh, 4 ranks.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target gpu_collectives weftrun weft-bench > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log
nvidia-cuda-mps-control -d
for n in 2 4 8; do
  WEFT_TIMEOUT_S=10 timeout 60 build-gpu/weftrun --grace 5 -n $n -- build-gpu/tests/gpu/gpu_collectives > $R/coll_n$n.log 2>&1; echo "gpu_collectives n=$n rc=$? ($(el))"
  grep -m3 "^FAIL" $R/coll_n$n.log | cut -c1-300; grep -h "PASS" $R/coll_n$n.log | head -2
  snap
done
WEFT_TIMEOUT_S=10 WEFT_CUDA_MAX_BLOCKS=3 timeout 60 build-gpu/weftrun --grace 5 -n 2 -- build-gpu/tests/gpu/gpu_collectives > $R/coll_b3.log 2>&1; echo "gpu_collectives 3 blocks rc=$? ($(el))"
grep -m3 "^FAIL" $R/coll_b3.log | cut -c1-300
snap
for rep in 1 2; do
  timeout 30 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_to_allv -b 1K -e 256K -f 4 -n 40 -w 5 -c 1 --json $R/v4_push_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL push $rep"
  WEFT_CUDA_PUSH_BYTES=0 timeout 30 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_to_allv -b 1K -e 256K -f 4 -n 40 -w 5 -c 1 --json $R/v4_mesh_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL mesh $rep"
done; echo "== bench ($(el))"
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
