#!/bin/bash
# Session 13, call I (2 x H200): branch a2a-stores at c781e3b (A: store form on the engines by
# size) against A + d/side_streams.patch (B: copies after the first on side streams).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) &
(cmake -S scratch/s13/side -B build-side -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake-side.log 2>&1 && cmake --build build-side -j16 > $R/build-side.log 2>&1) &
wait
[ -x build-gpu/weft-bench-nccl ] && [ -x build-side/weft-bench ] || { tail -20 $R/build.log $R/build-side.log; snap; exit 1; }
echo "== builds ok ($(el))"
nvcc -O2 -arch=sm_90 -o /tmp/ce_probe_vmm scratch/s13/ce_probe_vmm.cu -lcuda && timeout 90 /tmp/ce_probe_vmm | tee $R/ce_probe_vmm.txt
echo "probe ($(el))"
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=150 timeout 165 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1
echo "suite2 rc=$? ($(el))"; tail -1 $R/suite2/summary.txt; grep "FAIL\|NOT-RUN" $R/suite2/summary.txt | head -5
grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; snap
export WEFT_BACKEND=cuda
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  for b in gpu side; do
    for mode in stores loads; do
      case $mode in stores) e="";; loads) e="WEFT_REMOTE_STORES=0";; esac
      env $e timeout 120 build-$b/weftrun -n 2 build-$b/weft-bench -t all_to_all -b 64M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/a_${b}${mode}_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $b $mode rep $rep"
    done
  done
  echo "rep $rep ($(el))"; snap
done
python3 scratch/s13/tab.py $R a gpustores sidestores gpuloads sideloads | tee $R/table.txt
for b in gpu side; do
  WEFT_LIBRARY=build-$b/libweft.so timeout 120 build-$b/weftrun -n 2 python3 scratch/s13/prof_a2a.py $R $b > $R/prof_$b.log 2>&1 || echo "FAIL prof $b"
  grep "^\[$b\]" $R/prof_$b.log | head -30
done
snap
echo "== done ($(el))"
