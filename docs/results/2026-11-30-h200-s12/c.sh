#!/bin/bash
# Session 12, device call C (2 x H200): main (7fff445): every collective weft vs NCCL at
# 16 MiB - 1 GiB (x4), two repetitions alternated (results checked in the first), and
# all-to-all / all-to-all-v with the copy engines forced on (1) and off (0).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weftrun weft-bench weft-bench-nccl > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  timeout 150 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/L_weft_r$rep.json > $R/L_weft_r$rep.log 2>&1 || echo "FAIL weft rep $rep"
  timeout 150 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/L_nccl_r$rep.json > $R/L_nccl_r$rep.log 2>&1 || echo "FAIL nccl rep $rep"
  echo "rep $rep ($(el))"; snap
done
for ce in 0 1; do for t in all_to_all all_to_allv; do
  WEFT_CUDA_COPY_ENGINE=$ce timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $t -b 64M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 0 --json $R/ce${ce}_$t.json > $R/ce${ce}_$t.log 2>&1 || echo "FAIL ce $ce $t"
done; done; echo "== ce ($(el))"
snap
echo "== done ($(el))"
