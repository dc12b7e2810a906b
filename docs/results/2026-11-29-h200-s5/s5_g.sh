#!/bin/bash
# Session 5, device call G (2 x H200): the push path on NCCL's LL protocol. GPU suite with 2
# ranks (one per GPU) and 4 (two per GPU under MPS), then weft with WEFT_CUDA_PUSH_BYTES=0 and
# 4M against NCCL, out of place, one rank per GPU.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { grep -B2 -A10 "error" $R/build.log | head -40; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=20
WEFT_CUDA_PUSH_BYTES=4M timeout 40 build-gpu/weftrun -n 2 --grace 3 build-gpu/weft-bench -t all -b 8 -e 1M -f 8 -n 5 -w 1 > $R/smoke.log 2>&1; rc=$?
echo "smoke rc=$rc wrong=$(grep -vE '^#' $R/smoke.log | awk '{for (i = 9; i <= NF; i += 4) if ($i != "0" && $i != "N/A") w++} END {print w + 0}') ($(el))"
[ $rc = 0 ] || { tail -15 $R/smoke.log; snap; exit 1; }
for coll in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  for lib in p0 p4M nccl; do
    prog=weft-bench; [ $lib = nccl ] && prog=weft-bench-nccl
    pb=${lib#p}; [ $lib = nccl ] && pb=0
    WEFT_CUDA_PUSH_BYTES=$pb timeout 30 build-gpu/weftrun -n 2 --grace 3 build-gpu/$prog -t $coll -b 8 -e 4M -f 8 -n 300 -w 30 --inplace 0 > $R/small_${coll}_${lib}.log 2>&1 || echo "FAILED $coll $lib: $(tail -2 $R/small_${coll}_${lib}.log)"
  done
done
echo "== bench done ($(el))"
for coll in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  echo "-- $coll: size pull push nccl (#wrong push)"
  paste <(grep -vE "^#" $R/small_${coll}_p0.log | awk '{print $1, $6}') <(grep -vE "^#" $R/small_${coll}_p4M.log | awk '{print $6, $9}') <(grep -vE "^#" $R/small_${coll}_nccl.log | awk '{print $6}') | tr '\t' ' ' | tr '\n' ';'; echo
done
snap
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=150 timeout 165 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -6; grep -c " PASS " $R/suite/summary.txt; grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
grep -h "^FAIL" $R/suite/gpu-tests.log | head -6
snap
echo "== done ($(el))"
