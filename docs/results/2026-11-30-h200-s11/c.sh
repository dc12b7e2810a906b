#!/bin/bash
# Session 11, device call C (2 x H200, build of call A): the push path past 1 MiB between two
# GPUs: every collective, 2 ranks, 1M-4M, WEFT_CUDA_PUSH_BYTES=1M vs 4M, three repetitions
# alternated.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
for rep in 1 2 3; do
  c=0; [ $rep = 1 ] && c=1
  for P in 1M 4M; do
    WEFT_CUDA_PUSH_BYTES=$P timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 1M -e 4M -f 2 -n 40 -w 5 -c $c --json $R/r_${P}_r$rep.json > $R/r_${P}_r$rep.log 2>&1 || echo "FAIL $P rep $rep"
  done
  echo "== rep $rep ($(el))"
done
grep -h -A3 "#wrong" $R/r_*_r1.log | awk '$10 != 0 || $15 != 0' | grep -v "^#\|^--" | head
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
