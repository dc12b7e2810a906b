#!/bin/bash
# Session 13, call K (2 x H200): side streams (X_SIDE) and remote copies first (X_ORDER) in
# one experimental build (scratch/s13/side): timelines, then all-to-all 64 MiB - 1 GiB.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S scratch/s13/side -B build-side -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake-side.log 2>&1 && cmake --build build-side -j32 --target weft weftrun weft-bench > $R/build-side.log 2>&1) || { tail -20 $R/build-side.log; exit 1; }
echo "== build ($(el))"
export PYTHONPATH=$PWD/python WEFT_BACKEND=cuda
for v in "1 1 stores" "1 1 loads"; do
  set -- $v; e=""; [ $3 = loads ] && e="WEFT_REMOTE_STORES=0"
  env $e X_SIDE=$1 X_ORDER=$2 WEFT_LIBRARY=build-side/libweft.so timeout 120 build-side/weftrun -n 2 python3 scratch/s13/prof_a2a.py $R o$3 > $R/prof_o$3.log 2>&1 || { echo "FAIL prof $v"; tail -5 $R/prof_o$3.log; }
  grep "^\[o$3\]" $R/prof_o$3.log | sed -n '7,12p'
done
echo "== profiles ($(el))"
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  for v in "0 0 stores" "1 0 stores" "1 1 stores" "0 1 stores" "1 1 loads" "0 0 loads"; do
    set -- $v; e=""; [ $3 = loads ] && e="WEFT_REMOTE_STORES=0"
    env $e X_SIDE=$1 X_ORDER=$2 timeout 120 build-side/weftrun -n 2 build-side/weft-bench -t all_to_all -b 64M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/a_s$1o$2$3_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $v rep $rep"
  done
  echo "rep $rep ($(el))"; snap
done
python3 scratch/s13/tab.py $R a s0o0stores s1o0stores s1o1stores s0o1stores s1o1loads s0o0loads | tee $R/table.txt
snap
echo "== done ($(el))"
