#!/bin/bash
# Session 8, device call I (2 x H200): the committed push-path fence: tests and first-use.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt; git diff --stat >> $R/commit.txt
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target first-use-nccl weftrun weft-bench gpu_collectives gpu_graph > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda
timeout 40 build-gpu/weftrun -n 2 --grace 5 build-gpu/first-use-nccl -m roa,nccl -s 64K -g 10,100 -r 7 > $R/i_fu.log 2>&1; echo "first-use rc=$?"
grep -E "^ *(roa|nccl) " $R/i_fu.log | cut -c1-150
timeout 30 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce -b 8 -e 1M -f 8 -n 300 -w 30 --inplace 0 > $R/i_wb.log 2>&1; echo "weft-bench rc=$?"; grep -vE "^#" $R/i_wb.log | tail -7
for t in gpu_collectives gpu_graph; do timeout 40 build-gpu/weftrun -n 2 build-gpu/tests/gpu/$t > $R/i_$t.log 2>&1; echo "$t rc=$? ($(el))"; done
snap
echo "== done ($(el))"
