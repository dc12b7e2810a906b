#!/bin/bash
# Session 18, call B (2 x H200): all_reduce MAX against SUM with the old float MAX/MIN (compare
# and select) and the new one (NaN ignored), interleaved; SASS of both selects.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
rm -rf /tmp/old && mkdir /tmp/old && tar cf - --exclude=./build-gpu --exclude=./.git . | tar xf - -C /tmp/old
cp scratch/s18/reduce_cuda_old.cuh /tmp/old/src/exec/reduce_cuda.cuh
b() { cmake -S $1 -B $1/$2 -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake_$3.log 2>&1 && cmake --build $1/$2 -j16 --target weft-bench weftrun > $R/build_$3.log 2>&1; }
b . build-gpu new & b /tmp/old build old & wait
ls build-gpu/weft-bench /tmp/old/build/weft-bench || { tail -20 $R/build_*.log; snap; exit 1; }
echo "== builds ok ($(el))"
(cd scratch/s18 && nvcc -arch=sm_90 -cubin -O3 -o /tmp/mx.cubin mx.cu && cuobjdump -sass /tmp/mx.cubin | grep -E "Function|FSETP|FSEL|FMNMX|PLOP|SEL" > $R/sass.txt 2>&1); head -40 $R/sass.txt
for rep in 1 2; do for v in old new; do
  [ $v = old ] && B=/tmp/old/build || B=build-gpu
  for dt in float bfloat16; do for op in sum max; do
    timeout 40 $B/weftrun -n 2 -- $B/weft-bench --backend cuda -t all_reduce -o $op -d $dt -b 4M -e 256M -f 8 -n 20 --inplace 0 --json $R/ar_${v}_${op}_${dt}_$rep.json > $R/ar_${v}_${op}_${dt}_$rep.log 2>&1
    echo "rep $rep $v $op $dt rc=$? $(grep -E '^ *[0-9]' $R/ar_${v}_${op}_${dt}_$rep.log | awk '{printf "%s ", $6}')"
  done; done
done; done; snap
echo "== done ($(el))"
