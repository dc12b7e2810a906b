#!/bin/bash
# Session 8, device call B (1 x H200): the steady-state sweep on HEAD (every collective,
# zero-copy / staged / copy engine, 8 B - 1 GiB, 4 ranks under MPS).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
nvidia-smi -q -d CLOCK,PERFORMANCE > $R/smi_before.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
left=$(( 560 - $(date +%s) + t0 ))
timeout $left bash bench/gpu_sweep.sh build-gpu $R/sweep 4 > $R/sweep_summary.txt 2>&1; echo "sweep rc=$? ($(el))"
grep -c . $R/sweep_summary.txt; grep -h "FAILED" $R/sweep/gpu_sweep.log | head
awk '$3 ~ /^(8|65536|2097152|16777216|134217728|1073741824)$/' $R/sweep_summary.txt | cut -c1-100
snap
echo "== done ($(el))"
