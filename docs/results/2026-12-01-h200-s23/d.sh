#!/bin/bash
# Session 23, call D (1 x H200): HEAD's Python GPU step (python/tests/run_gpu.sh, now through
# tools/mps.sh) and bench/gpu_registration.sh with a 90 s budget (its MPS wiring: daemon, trap,
# logs in OUT_DIR/mps/mps.log).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
timeout 300 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python gpu rc=$? ($(el))"; tail -5 $R/py.log; ls $R/py
snap
GPUREG_BUDGET_S=90 timeout 150 bash bench/gpu_registration.sh build-gpu $R/reg > $R/reg.log 2>&1; echo "gpu_registration.sh rc=$? ($(el))"; grep -E "mps|MPS|skipped" $R/reg.log | head -5; ls $R/reg $R/reg/mps 2>&1 | head -20
snap; echo "== done ($(el))"
