#!/bin/bash
# Session 12, device call D (2 x H200): working tree (7fff445 + the copy engines' side streams:
# a call's copies run at once, not one after the other): build with NCCL, GPU suite on both GPUs
# (2/4 ranks; its copy-engine runs of gpu_collectives and gpu_graph take the side streams), then
# all-to-all, all-to-all-v, all-gather, broadcast at 64 MiB - 1 GiB out of place with
# WEFT_CUDA_COPY_ENGINE=0 / 1 / auto and NCCL, two repetitions alternated (checked up to 64 MiB
# in a separate run).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=150 timeout 165 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite 2 GPUs rc=$? ($(el))"
tail -1 $R/suite2/summary.txt; grep -v " PASS " $R/suite2/summary.txt | grep "FAIL\|NOT-RUN" | head -5; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c
snap
export WEFT_BACKEND=cuda
for t in all_to_all all_gather; do
  WEFT_CUDA_COPY_ENGINE=1 timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $t -b 4M -e 64M -f 4 -n 5 -w 2 -c 1 --json $R/chk_$t.json > /dev/null 2>> $R/err.log || echo "FAIL check $t"
done; echo "== checked ($(el))"
for rep in 1 2; do
  for ce in 0 1 auto; do
    WEFT_CUDA_COPY_ENGINE=$ce timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 64M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 0 --json $R/ce_${ce}_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL ce $ce rep $rep"
  done
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 64M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 0 --json $R/ce_nccl_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL nccl rep $rep"
  echo "rep $rep ($(el))"; snap
done
echo "== done ($(el))"
