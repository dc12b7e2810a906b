#!/bin/bash
# Session 8, device call G (2 x H200): experiment (WEFT_EXP, not committed): 1 = one host-word
# read per converged warp group in the waits' checks, 2 = system fence after the push stores.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git diff > $R/exp.diff
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target first-use-nccl weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda
for rep in 1 2; do for exp in 0 1 2 3; do
  WEFT_EXP=$exp timeout 60 build-gpu/weftrun -n 2 --grace 5 build-gpu/first-use-nccl -m roa -s 64K,16M -g 10,50,100 -r 7 > $R/g_exp${exp}_$rep.log 2>&1 || echo "FAIL exp $exp"
  awk -v t="exp=$exp r$rep" '$1=="roa"{printf "%-10s %9s %4s first %7.1f steady %6.1f after %7.1f f/s %6s h %5s/%5s\n", t,$2,$3,$4,$5,$6,$7,$14,$15}' $R/g_exp${exp}_$rep.log
done; done
snap
echo "== done ($(el))"
