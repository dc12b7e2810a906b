#!/bin/bash
# Session 18, call A (2 x H200): main with the all_to_allv self-pair mismatch, gpu_invalid's
# mismatch table, float MAX/MIN ignoring NaNs, and the Python MoeHandle/empty() locking:
# build, CTest unit (test_reduce_cuda), Python GPU pytest, GPU suite on both GPUs (2/4) and on
# one (2/4/8, MPS); the device guard's runtime calls; all_reduce MAX against SUM.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 120 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed|Skipped" $R/ctest_unit.log | head -5)
grep -E "^test_reduce_cuda|passed|checks" $R/ctest_unit.log | grep -i reduce_cuda | head -3
nvcc -arch=sm_90 -O2 -o /tmp/setdev scratch/s18/setdev.cu && /tmp/setdev > $R/setdev.txt 2>&1; cat $R/setdev.txt
RUN_GPU_STEPS=pytest timeout 170 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -3 $R/py.log; snap
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 150
suite suite1 "2 4 8" 200 CUDA_VISIBLE_DEVICES=0
for dt in float bfloat16; do for op in sum max; do
  timeout 40 build-gpu/weftrun -n 2 -- build-gpu/weft-bench --backend cuda -t all_reduce -o $op -d $dt -b 64K -e 256M -f 64 --inplace 0 --json $R/ar_${op}_${dt}.json > $R/ar_${op}_${dt}.log 2>&1
  echo "all_reduce $op $dt rc=$?"; grep -E "^ *[0-9]" $R/ar_${op}_${dt}.log | tail -3
done; done; snap
echo "== done ($(el))"
