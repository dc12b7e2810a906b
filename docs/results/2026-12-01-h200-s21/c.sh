#!/bin/bash
# Session 21, call C (1 x H200: the two-GPU kind was no longer lent): HEAD after the review of the session's diff (registry wait for
# memory freed earlier, store eviction by age, digest wording, gpu_registration's collective
# skip, the shared MoE destroy race, Python init on TypeError): CTest unit, the GPU suite with 2
# and 4 ranks under MPS (memcheck), and the Python package on the GPU.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1
echo "suite2 rc=$? ($(el))"; tail -1 $R/suite2/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite2/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; snap
timeout 230 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"
grep -E "^(PASS|FAIL)" $R/py.log | sort -u; grep -h -E "[0-9]+ passed" $R/py/*.log | tail -2
snap; echo "== done ($(el))"
