#!/bin/bash
# Session 14, call 5: the tree with the new rules (engines for every fan-out by size; two-shot
# all-reduce loads from 256 MiB across GPUs; 2 ranks on two GPUs two-shot out of place from
# 4 MiB): GPU suite on two GPUs (2/4) and one (2/4), then all-reduce and all-gather against NCCL.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok $(git rev-parse --short HEAD) ($(el))"
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 120
suite suite1 "2 4" 100 CUDA_VISIBLE_DEVICES=0
export WEFT_BACKEND=cuda
for rep in 1 2; do
  for p in weft-bench weft-bench-nccl; do
    for t in all_reduce all_gather; do
      timeout 60 build-gpu/weftrun -n 2 build-gpu/$p -t $t -b 4M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/b_${p#weft-bench}x_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $p $t rc $?"
    done
  done
  echo "rep $rep ($(el))"; snap
done
python3 scratch/s14/tab.py $R b x -ncclx | tee $R/table_b.txt; snap
echo "== done ($(el))"
