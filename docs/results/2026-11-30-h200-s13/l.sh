#!/bin/bash
# Session 13, call L (2 x H200): branch a2a-stores with remote copies first (suite on two GPUs
# and on one), then all-to-all 64 MiB - 1 GiB against the experiment X_LOCALSM (the rank's
# own block copied by an SM kernel on a side stream while the engines copy the peer's).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j24 > $R/build.log 2>&1) &
(cmake -S scratch/s13/side -B build-side -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake-side.log 2>&1 && cmake --build build-side -j8 --target weft weftrun weft-bench > $R/build-side.log 2>&1) &
wait
[ -x build-gpu/weft-bench ] && [ -x build-side/weft-bench ] || { tail -20 $R/build.log $R/build-side.log; snap; exit 1; }
echo "== builds ok ($(el))"
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 150
suite suite1 "2 4 8" 200 CUDA_VISIBLE_DEVICES=0
export PYTHONPATH=$PWD/python WEFT_BACKEND=cuda
X_ORDER=1 X_LOCALSM=1 WEFT_LIBRARY=build-side/libweft.so timeout 60 build-side/weftrun -n 2 python3 scratch/s13/prof_a2a.py $R sm > $R/prof_sm.log 2>&1 || { echo "FAIL prof"; tail -5 $R/prof_sm.log; }
grep "^\[sm\]" $R/prof_sm.log | sed -n '7,12p'
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  for v in "gpu stores" "gpu loads" "side stores" "side loads"; do
    set -- $v; e=""; [ $2 = loads ] && e="WEFT_REMOTE_STORES=0"
    env $e X_ORDER=1 X_LOCALSM=1 timeout 60 build-$1/weftrun -n 2 build-$1/weft-bench -t all_to_all -b 64M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/a_$1$2_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $v rep $rep"
  done
  echo "rep $rep ($(el))"; snap
done
python3 scratch/s13/tab.py $R a gpustores gpuloads sidestores sideloads | tee $R/table.txt
snap
echo "== done ($(el))"
