#!/bin/bash
# Session 11, device call G (2 x H200): why the mesh takes ~26 us at 2 MiB and 4 MiB alike between
# two GPUs: all-gather, reduce-scatter, all-reduce, broadcast, 2 ranks, 1M-8M, default against
# WEFT_CUDA_MAX_BLOCKS=16/64, WEFT_REMOTE_STORES=0 and WEFT_CUDA_PUSH_BYTES=0; two reps alternated.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weft-bench weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
for rep in 1 2; do
  for v in base b16 b64 nostore; do
    case $v in base) e="";; b16) e="WEFT_CUDA_MAX_BLOCKS=16";; b64) e="WEFT_CUDA_MAX_BLOCKS=64";; nostore) e="WEFT_REMOTE_STORES=0";; esac
    for t in all_gather reduce_scatter all_reduce broadcast; do
      env $e timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $t -b 1M -e 8M -f 2 -n 40 -w 5 -c 0 --json $R/g_${v}_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $v $t rep $rep"
    done
  done
  echo "== rep $rep ($(el))"
done
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
