#!/bin/bash
# Session 8, device call E (2 x H200): HEAD on two GPUs (GPU suite 2 and 4 ranks, the window
# agreement on CUDA), and first-use with NCCL side by side (first-use-nccl, one rank per GPU):
# the cost of an idle gap on weft's first and used-buffer calls and on NCCL's.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt; git status --short >> $R/commit.txt
nvidia-smi topo -m > $R/topo.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"; ls build-gpu/first-use-nccl
export WEFT_BACKEND=cuda
for kind in sleep busy; do
  timeout 120 build-gpu/weftrun -n 2 --grace 5 build-gpu/first-use-nccl -m roa,staged,nccl -s 64K,16M -g 10,100 -r 9 --gap-kind $kind --json $R/fu_nccl_$kind.json > $R/fu_nccl_$kind.log 2>&1; echo "first-use-nccl $kind rc=$? ($(el))"
  grep -E "^ *(roa|staged|nccl) " $R/fu_nccl_$kind.log | cut -c1-150
done
snap
WEFT_LOG_LEVEL=debug GPU_TEST_QUICK=1 timeout 60 build-gpu/weftrun -n 2 build-gpu/tests/gpu/gpu_collectives > $R/window_debug.log 2>&1; echo "window debug rc=$?"; grep -h "window at" $R/window_debug.log | head -2
unset WEFT_BACKEND
left=$(( 540 - $(date +%s) + t0 ))
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=$((left-15)) timeout $left bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
tail -3 $R/suite/summary.txt; grep -c " PASS " $R/suite/summary.txt; grep -v " PASS " $R/suite/summary.txt | grep -v "^program\|^---" | head
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
echo "== done ($(el))"
