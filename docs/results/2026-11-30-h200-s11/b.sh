#!/bin/bash
# Session 11, device call B (2 x H200, build of call A): the push path above 256 KiB between two
# GPUs: every collective, 2 ranks, 256K-1M (-f 2) and 384K/768K, WEFT_CUDA_PUSH_BYTES=auto (256K
# here) vs 1M, and NCCL at 256K-1M, three repetitions alternated.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
cmake --build build-gpu -j32 > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
for rep in 1 2 3; do
  c=0; [ $rep = 1 ] && c=1
  for P in auto 1M; do
    WEFT_CUDA_PUSH_BYTES=$P timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 256K -e 1M -f 2 -n 40 -w 5 -c $c --json $R/p_${P}_r$rep.json > $R/p_${P}_r$rep.log 2>&1 || echo "FAIL $P rep $rep"
    WEFT_CUDA_PUSH_BYTES=$P timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 384K -e 768K -f 2 -n 40 -w 5 -c $c --json $R/q_${P}_r$rep.json > $R/q_${P}_r$rep.log 2>&1 || echo "FAIL q $P rep $rep"
  done
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 256K -e 1M -f 2 -n 40 -w 5 -c $c --json $R/p_nccl_r$rep.json > $R/p_nccl_r$rep.log 2>&1 || echo "FAIL nccl rep $rep"
  echo "== rep $rep ($(el))"
done
grep -h "wrong" $R/*.log | sort | uniq -c | head
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
