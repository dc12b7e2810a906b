#!/bin/bash
# Session 5, device call A (1 x H200): GPU suite on main (5dfa3dd), and a host-phase trace of
# first-use (scratch/trace.patch, never merged) to place the after-gap cost of a 64 KiB call.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
rm -rf /tmp/tr && mkdir /tmp/tr && cp -r CMakeLists.txt cmake src include tools bench tests python examples /tmp/tr/ 2>/dev/null
(cd /tmp/tr && (patch -p1 < $OLDPWD/scratch/trace.patch || git apply $OLDPWD/scratch/trace.patch) > $R/patch.log 2>&1 && cmake -S /tmp/tr -B /tmp/tr/build -DWEFT_CUDA=ON > $R/cmake_tr.log 2>&1 && cmake --build /tmp/tr/build -j8 --target weftrun first-use > $R/build_tr.log 2>&1) &
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
wait; ls /tmp/tr/build/first-use || { tail $R/patch.log $R/build_tr.log; }
echo "== build ok ($(el))"
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -5; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for kind in sleep busy spin; do
  mkdir -p $R/trace_$kind
  TRACE_DIR=$R/trace_$kind timeout 100 /tmp/tr/build/weftrun -n 4 --grace 5 /tmp/tr/build/first-use -m roa -s 64K -g 10,100 -r 7 --gap-kind $kind > $R/first_use_$kind.log 2>&1; echo "first-use $kind rc=$? ($(el))"
done
echo quit | nvidia-cuda-mps-control
snap
grep -hvE "^# (times|buffer|of the|ranks, med|meets|h_first|first-use)" $R/first_use_*.log | cut -c1-190
echo "== done ($(el))"
