#!/bin/bash
# Prepared in session 13, for the next session's first call (2 x H200), on main (2af6e62 or later):
# 1. GPU suite on both GPUs (2/4 ranks) and on one (2/4/8, MPS): checks 2af6e62's copy-engine
#    runs at the largest rank count (up to 7 side streams per call), never run before.
# 2. Every collective at 16 MiB - 1 GiB with WEFT_CUDA_COPY_ENGINE=0 / 1 / auto and NCCL, two
#    repetitions alternated, the first checked: the engines with side streams against the SMs
#    (is the 64 MiB threshold still right? should the out-of-place all-gather's fan-out still stay
#    on the SMs?), and weft beside NCCL in one run.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 160
suite suite1 "2 4 8" 230 CUDA_VISIBLE_DEVICES=0
export WEFT_BACKEND=cuda
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  for ce in 0 1 auto; do
    WEFT_CUDA_COPY_ENGINE=$ce timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/s_ce${ce}_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL ce $ce rep $rep"
  done
  timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/s_nccl_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL nccl rep $rep"
  echo "rep $rep ($(el))"; snap
done
python3 scratch/s14/tab.py $R s ce0 ce1 ceauto nccl | tee $R/table.txt; snap
echo "== done ($(el))"
