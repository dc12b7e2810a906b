#!/bin/bash
# Session 22, call C (1 x H200): HEAD's Python GPU step (python/tests/run_gpu.sh: CUDA cases,
# torch, tp_mlp, pip) and weft-calibrate at its defaults, 2 ranks under MPS (one GPU: no knee at
# K = all expected, so R is reported with the "not checked" comment, not dropped).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
timeout 330 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python gpu rc=$? ($(el))"; tail -4 $R/py.log
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/c-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/c-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
WEFT_BACKEND=cuda timeout 150 build-gpu/weftrun -n 2 --grace 5 build-gpu/weft-calibrate -r 1 --json $R/calibrate.json > $R/calibrate.log 2>&1
echo "weft-calibrate rc=$? ($(el))"; grep -E "drain_gbps|not checked|fit failed" $R/calibrate.log | head -12
echo quit | nvidia-cuda-mps-control
snap; echo "== done ($(el))"
