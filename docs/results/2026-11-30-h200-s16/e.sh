#!/bin/bash
# Session 16, call E (1 x H200): gpu_fault after the harness helper (3198206), 2 and 4 ranks
# under MPS, and with --inflight.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target gpu_fault weftrun > $R/build.log 2>&1) || { tail -20 $R/build.log; exit 1; }
nvidia-cuda-mps-control -d
export WEFT_BACKEND=cuda NCCL_NVLS_ENABLE=0 WEFT_TIMEOUT_S=5
for n in 2 4; do
  timeout 120 sh tests/gpu/gpu_fault.sh build-gpu/weftrun build-gpu/tests/gpu/gpu_fault $n > $R/fault$n.log 2>&1; echo "gpu_fault n=$n rc=$?"; grep -c "^PASS" $R/fault$n.log; grep "FAIL" $R/fault$n.log | head -3
done
timeout 120 sh tests/gpu/gpu_fault.sh build-gpu/weftrun build-gpu/tests/gpu/gpu_fault 2 --inflight > $R/inflight.log 2>&1; echo "gpu_fault --inflight rc=$?"; grep "FAIL" $R/inflight.log | head -3
echo quit | nvidia-cuda-mps-control
cp $R/*.log $OUT/ 2>/dev/null
