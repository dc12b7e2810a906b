#!/bin/bash
# Session 23, call C (1 x H200): HEAD after 21c607b (the arrival fence on the pre-copy path only)
# and 26a122c (tools/mps.sh). Small all-reduce latency old (bd7e258) vs new, 4 ranks under MPS,
# interleaved 3 times; `make run` (now under MPS on one GPU); the GPU suite through tools/mps.sh.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
if [ ! -x /tmp/old/b/weft-bench ]; then
  rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s23/old.tgz -C /tmp/old &&
  (cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j16 --target weftrun weft-bench > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
fi
echo "== old build ($(el))"
source tools/mps.sh; mps_start > $R/mps_lat.log
for rep in 1 2 3; do
  for tb in old:/tmp/old/b new:build-gpu; do
    tag=${tb%%:*}; b=${tb#*:}
    WEFT_BACKEND=cuda timeout 60 $b/weftrun -n 4 --grace 5 $b/weft-bench -t all_reduce -b 8 -e 1M -f 8 -n 2000 -w 200 -c 0 > $R/lat_${tag}_$rep.log 2>&1
    echo "lat $tag rep $rep rc=$?"
  done
done
mps_finish $R/mps_lat.log
for f in $R/lat_*; do echo "$(basename $f): $(awk '$1 ~ /^[0-9]+$/ {printf "%s:%s ", $1, $6}' $f)"; done
echo "== latency ($(el))"
snap
timeout 200 make run > $R/make_run.log 2>&1; echo "make run rc=$? ($(el))"; grep -E "MPS|done in|#wrong" $R/make_run.log | head -4; grep -c " 0  " $R/make_run.log
snap
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=250 timeout 260 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1
echo "suite rc=$? ($(el))"; tail -1 $R/suite/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c; grep -h "^mps:" $R/suite.log | head -4
snap; echo "== done ($(el))"
