#!/bin/bash
# Session 5, device call D (2 x H200 over NVLink, one rank per GPU): the push path across GPUs.
# GPU suite (2 ranks), then small and medium messages: weft with WEFT_CUDA_PUSH_BYTES=0 and 4M,
# and NCCL, alternating, twice, out of place.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
GPU_TEST_RANKS=2 GPU_TEST_BUDGET_S=150 timeout 165 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite2/summary.txt | tail -4; grep -c " PASS " $R/suite2/summary.txt; grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c
snap
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for rep in 1 2; do
for coll in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  for lib in p0 p4M nccl; do
    prog=weft-bench; [ $lib = nccl ] && prog=weft-bench-nccl
    pb=${lib#p}; [ $lib = nccl ] && pb=0
    WEFT_CUDA_PUSH_BYTES=$pb timeout 60 build-gpu/weftrun -n 2 build-gpu/$prog -t $coll -b 8 -e 8M -f 4 -n 300 -w 30 --inplace 0 > $R/small_${coll}_${lib}_$rep.log 2>&1 || echo "FAILED $coll $lib"
  done
done
done
echo "== small done ($(el))"
snap
for coll in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  for rep in 1 2; do
  echo "-- $coll rep $rep: size pull push nccl"
  paste <(grep -vE "^#" $R/small_${coll}_p0_$rep.log | awk '{print $1, $6}') <(grep -vE "^#" $R/small_${coll}_p4M_$rep.log | awk '{print $6}') <(grep -vE "^#" $R/small_${coll}_nccl_$rep.log | awk '{print $6}') | tr '\t' ' ' | tr '\n' ';'; echo
  done
done
echo "== done ($(el))"
