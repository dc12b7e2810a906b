#!/bin/bash
# Session 20, call D (1 x H200): the Python package on the CUDA backend with the final tree
# (python/tests/run_gpu.sh: pytest with 2 and 4 ranks under MPS, examples/tp_mlp.py, pip install).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
timeout 320 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"
grep -E "^(PASS|FAIL)" $R/py.log; grep -h -E "[0-9]+ passed" $R/py/*.log | tail -2
tar czf $OUT/results.tgz -C /tmp res
