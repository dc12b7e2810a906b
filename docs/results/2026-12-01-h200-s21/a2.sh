#!/bin/bash
# Session 21, call A2 (1 x H200): memcheck of gpu_moe (with its new destroy race) and of
# gpu_collectives, gpu_moe at 2 ranks (tests/gpu/run.sh with GPU_TEST_ONLY=gpu_moe); the Python
# package on the GPU (python/tests/run_gpu.sh) at HEAD; all-gather zero-copy vs staged at 8 and
# 16 MiB, 4 ranks under MPS, three alternations.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
GPU_TEST_ONLY=gpu_moe GPU_TEST_RANKS=2 GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/moe > $R/moe.log 2>&1
echo "suite moe rc=$? ($(el))"; tail -6 $R/moe/summary.txt; grep -h "ERROR SUMMARY" $R/moe/gpu-tests.log | sort | uniq -c; snap
timeout 300 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"
grep -E "^(PASS|FAIL)" $R/py.log; grep -h -E "[0-9]+ passed" $R/py/*.log | tail -3; snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/a2-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/a2-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for i in 1 2 3; do for buf in weft malloc; do
  WEFT_BACKEND=cuda WEFT_CUDA_COPY_ENGINE=0 timeout 60 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_gather --buffers $buf -b 8M -e 16M -f 2 -n 50 -w 5 -c 1 --inplace 0 > $R/ag_${buf}_$i.log 2>&1
  echo "ag $buf $i rc=$?: $(grep -E '^ +(8388608|16777216) ' $R/ag_${buf}_$i.log | awk '{printf "%s:%s(wrong %s) ", $1, $6, $9}')"
done; done
echo quit | nvidia-cuda-mps-control
echo "== done ($(el))"; snap
