#!/bin/bash
# Session 19, call B (2 x H200): HEAD with the torch allocator, registry, EMFILE, MoE handle,
# device-guard and captured-mismatch changes. Build; CTest unit; the new GPU test cases against
# the library of f4e254a (must fail: torch alloc behind a free, a context-less thread left with
# a context, a captured mismatched dispatch breaking the capture); suite on both GPUs (2/4);
# the Python GPU pytest step.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
# The old library with today's tests: f4e254a's src/, include/ and build files
# (scratch/s19/old_src.tgz: git archive f4e254a src include CMakeLists.txt cmake).
rm -rf /tmp/oldt && mkdir -p /tmp/oldt && git ls-files -z | xargs -0 cp --parents -t /tmp/oldt
(cd /tmp/oldt && rm -rf src include && tar xzf $OLDPWD/scratch/s19/old_src.tgz) || echo "old tree failed"
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; } &
(cmake -S /tmp/oldt -B /tmp/oldt/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/oldt/b -j16 --target gpu_registration gpu_moe weftrun > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; } &
wait
[ -x build-gpu/weft-bench ] || { echo "no build"; snap; exit 1; }
echo "== builds ok ($(el))"
(cd build-gpu && timeout 120 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
# New tests, old library: 2 ranks, one per GPU (no MPS needed).
for t in gpu_registration gpu_moe; do
  WEFT_BACKEND=cuda WEFT_TIMEOUT_S=30 GPU_TEST_QUICK=1 timeout 150 /tmp/oldt/b/weftrun -n 2 /tmp/oldt/b/tests/gpu/$t > $R/old_$t.log 2>&1
  echo "OLD library, new $t: rc=$? ($(el))"; grep -E "^FAIL|^PASS" $R/old_$t.log | cut -c1-300 | head -8
done; snap
for t in gpu_registration gpu_moe; do
  WEFT_BACKEND=cuda WEFT_TIMEOUT_S=30 GPU_TEST_QUICK=1 timeout 150 build-gpu/weftrun -n 2 build-gpu/tests/gpu/$t > $R/new_$t.log 2>&1
  echo "NEW library, $t: rc=$? ($(el))"; grep -E "^FAIL|^PASS" $R/new_$t.log | cut -c1-300 | head -4
done; snap
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 150
RUN_GPU_STEPS=pytest timeout 170 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -3 $R/py.log; snap
echo "== done ($(el))"
