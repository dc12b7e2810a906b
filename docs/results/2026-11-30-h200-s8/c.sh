#!/bin/bash
# Session 8, device call C (1 x H200): the registration benchmarks on HEAD with the push path off
# (WEFT_CUDA_PUSH_BYTES=0: every size goes through registration), 4 ranks under MPS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
WEFT_CUDA_PUSH_BYTES=0 GPUREG_BUDGET_S=420 timeout 450 bash bench/gpu_registration.sh build-gpu $R/reg > $R/reg_all.log 2>&1; echo "registration rc=$? ($(el))"
grep -hE "^# [a-z_0-9]+: exit" $R/reg_all.log
for f in first_use first_use_busy first_use_chunk0; do
  echo "== $f"; grep -hvE "^# (times|buffer|of the|ranks, med|h_first|first-use|[a-z_0-9]+: exit)" $R/reg/$f.log | cut -c1-190
done
for f in launch_cost launch_cost_chunk0 reg_cost; do echo "== $f"; grep -v "^$" $R/reg/$f.log | tail -14; done
snap
echo "== done ($(el))"
