#!/bin/bash
# Session 21, call A (2 x H200): what session 20 could not run on a GPU (MoE handle release path
# fae3e7f/d321d9c, weft_comm_device 66b47c9, gpu_fault/gpu_late after 0130a78) and the new
# gpu_moe destroy race (54ebe93): CTest unit; GPU suite on both GPUs (2/4) and on one (2/4/8
# under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -8
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c
  grep -h "destroyed on a thread" $R/$name/gpu-tests.log | sort | uniq -c | head -4; snap
}
suite suite2 "2 4" 150
suite suite1 "2 4 8" 200 CUDA_VISIBLE_DEVICES=0
echo "== done ($(el))"
