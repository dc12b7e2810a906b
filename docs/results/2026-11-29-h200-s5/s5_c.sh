#!/bin/bash
# Session 5, device call C (1 x H200): the push path. GPU unit tests and suite (2/4/8 ranks,
# with the new no-push run), Python GPU cases touched by it, then with 4 ranks under MPS:
# weft-bench -t all with WEFT_CUDA_PUSH_BYTES=0 | 16M (alternating, twice) for the crossover,
# and first-use with the push path at its default and off.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { grep -B2 -A8 "error" $R/build.log | head -40; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -3 $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=300 timeout 315 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -6; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
grep -h "^FAIL" $R/suite/gpu-tests.log | head -8
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
W="build-gpu/weftrun -n 4 --grace 5"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for pass in 1 2; do for pb in 0 16M; do
  WEFT_CUDA_PUSH_BYTES=$pb timeout 120 $W build-gpu/weft-bench -t all -b 8 -e 16M -f 4 -n 100 -w 10 > $R/all_p${pb}_$pass.log 2>&1; echo "bench push=$pb pass $pass rc=$? ($(el))"
done; done
snap
for pb in 64K 0; do for kind in sleep busy; do
  WEFT_CUDA_PUSH_BYTES=$pb timeout 100 $W build-gpu/first-use -m roa,jit -s 64K,16M -g 10,100 -r 7 --gap-kind $kind > $R/fu_${kind}_p$pb.log 2>&1; echo "first-use $kind push=$pb rc=$? ($(el))"
done; done
echo quit | nvidia-cuda-mps-control
snap
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index --find-links scratch/wheels pytest > $R/pip.log 2>&1
left=$(( 570 - $(date +%s) + t0 ))
RUN_GPU_STEPS="pytest" PYTEST_ADDOPTS="-k 'registered_memory or graph or torch-cuda-global'" timeout $left bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -4 $R/py.log
snap
for pb in 0 16M; do echo "== push=$pb (pass 2)"; awk '/^# Collective:/{printf "\n%s:", $3} /^ +[0-9]/{printf " %s=%s/%s", $1, $6, $10}' $R/all_p${pb}_2.log; echo; done
for f in $R/fu_*.log; do echo "-- $f"; grep -E "^ +(roa|jit)" $f | cut -c1-140; done
echo "== done ($(el))"
