#!/bin/bash
# Session 23, call E (1 x H200): HEAD after the review of the session's change (the store closes
# every connection a second after a FAIL; tools/mps.sh under set -e, mps.log written once): the
# GPU suite (2/4/8 ranks under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=250 timeout 260 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1
echo "suite rc=$? ($(el))"; tail -1 $R/suite/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c; echo "mps.log: $(wc -c < $R/suite/mps.log) bytes"
snap; echo "== done ($(el))"
