#!/bin/bash
# Session 4, call F (2 x H200, one rank per GPU): copy engine vs SM kernel by size, and auto.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for coll in all_gather all_to_all broadcast; do
  for ce in 0 1 auto; do
    WEFT_CUDA_COPY_ENGINE=$ce timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $coll -b 8M -e 1G -f 2 -n 10 -w 3 -c 0 --inplace 0 --json $R/ce_${coll}_$ce.json > $R/ce_${coll}_$ce.log 2>&1 || echo "FAILED $coll $ce"
  done
done
echo "== sweep done ($(el))"
snap
GPU_TEST_RANKS=2 GPU_TEST_BUDGET_S=150 timeout 165 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite rc=$? ($(el))"
cat $R/suite2/summary.txt
snap
for coll in all_gather all_to_all broadcast; do
  echo "-- $coll: size kernel(0) ce(1) auto"
  paste <(grep -vE "^#" $R/ce_${coll}_0.log | awk '{print $1, $6}') <(grep -vE "^#" $R/ce_${coll}_1.log | awk '{print $6}') <(grep -vE "^#" $R/ce_${coll}_auto.log | awk '{print $6}')
done
echo "== done ($(el))"
