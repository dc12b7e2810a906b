#!/bin/bash
# Session 19, call C (2 x H200): HEAD. Build with NCCL; weft against NCCL, every collective
# 8 B - 1 GiB in one run (bench/gpu_vs_nccl.sh, one rank per GPU); all-reduce MAX beside NCCL's;
# the GPU suite on one GPU (2/4/8 ranks under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
timeout 240 bash bench/gpu_vs_nccl.sh build-gpu $R/vs 2 > $R/vs.log 2>&1; echo "vs_nccl rc=$? ($(el))"; snap
for lib in weft nccl; do p=weft-bench; [ $lib = nccl ] && p=weft-bench-nccl
  for dt in float bfloat16; do
    timeout 40 build-gpu/weftrun -n 2 build-gpu/$p --backend cuda -t all_reduce -o max -d $dt -b 32M -e 256M -f 8 -n 20 --inplace 0 > $R/max_${lib}_$dt.log 2>&1
    echo "$lib all_reduce max $dt rc=$?"; grep -E "^ *[0-9]" $R/max_${lib}_$dt.log | tail -2
  done; done; snap
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite1 "2 4 8" 220 CUDA_VISIBLE_DEVICES=0
cat $R/vs/vs_nccl.md
echo "== done ($(el))"
