#!/bin/bash
# Session 17, call A (2 x H200): main after the registry change (sparse host memfd, backlog in the registrar): build, CTest unit,
# the Python GPU pytest step, GPU suite on both GPUs (2/4), gpu_registration with a backlog of 1.
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
RUN_GPU_STEPS=pytest timeout 170 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -3 $R/py.log; snap
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 180
# The registrar's backlog at its smallest: 1000 roa registrations, one sent at a time.
env WEFT_TIMEOUT_S=30 WEFT_CUDA_CHUNK_BYTES=0 WEFT_REGISTRATION_BACKLOG=1 timeout 200 build-gpu/weftrun --grace 15 -n 2 -- build-gpu/tests/gpu/gpu_registration > $R/reg_backlog1.log 2>&1; echo "gpu_registration backlog 1 rc=$? ($(el))"; grep -E "^(PASS|FAIL)" $R/reg_backlog1.log | head -4; snap
echo "== done ($(el))"
