#!/bin/bash
# Session 13, call J (2 x H200): torch.profiler timelines of weft's all-to-all of 1 GiB, A (one
# stream) and B (side streams), stores and loads.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target weft weftrun > $R/build.log 2>&1) &
(cmake -S scratch/s13/side -B build-side -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake-side.log 2>&1 && cmake --build build-side -j16 --target weft weftrun > $R/build-side.log 2>&1) &
wait
echo "== builds ($(el))"
export PYTHONPATH=$PWD/python WEFT_BACKEND=cuda
for b in gpu side; do
  for mode in stores loads; do
    case $mode in stores) e="";; loads) e="WEFT_REMOTE_STORES=0";; esac
    env $e WEFT_LIBRARY=build-$b/libweft.so timeout 120 build-$b/weftrun -n 2 python3 scratch/s13/prof_a2a.py $R $b$mode > $R/prof_$b$mode.log 2>&1 || { echo "FAIL prof $b $mode"; tail -5 $R/prof_$b$mode.log; }
    grep "^\[$b$mode\]" $R/prof_$b$mode.log | head -14
  done
done
snap
echo "== done ($(el))"
