#!/bin/bash
# Session 13, call M (2 x H200): branch ce-side (copies after the first on side streams, forked
# before the first copy): GPU suite on both GPUs, all-to-all 64 MiB - 1 GiB, timeline.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -20 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  for mode in stores loads; do
    e=""; [ $mode = loads ] && e="WEFT_REMOTE_STORES=0"
    env $e timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_to_all -b 64M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/a_${mode}_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $mode rep $rep"
  done
done
python3 scratch/s13/tab.py $R a stores loads | tee $R/table.txt; snap
echo "bench ($(el))"
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=120 timeout 135 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1
echo "suite2 rc=$? ($(el))"; tail -1 $R/suite2/summary.txt; grep "FAIL\|NOT-RUN" $R/suite2/summary.txt | head -5
grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; snap
PYTHONPATH=$PWD/python WEFT_LIBRARY=build-gpu/libweft.so timeout 40 build-gpu/weftrun -n 2 python3 scratch/s13/prof_a2a.py $R side > $R/prof_side.log 2>&1 || echo "FAIL prof"
grep "^\[side\]" $R/prof_side.log | sed -n '7,12p'; snap
echo "== done ($(el))"
