#!/bin/bash
# Session 12, device call H (2 x H200), prepared on branch a2a-stores and NOT run in session 12
# (no device time was left): the all-to-all's store form. Build with NCCL; GPU suite on both GPUs
# (2/4 ranks) and on one (2/4/8 ranks, MPS); then all-to-all at 1 MiB - 1 GiB: stores on the SMs
# (default), stores on the copy engines (WEFT_CUDA_COPY_ENGINE=1), loads (WEFT_REMOTE_STORES=0,
# the engines from 64 MiB as before), and NCCL; two repetitions alternated, the first checked.
# First, e/ce_probe_vmm.cu (no weft): the copy engines on cudaMalloc and on VMM buffers.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
nvcc -O2 -arch=sm_90 -o /tmp/ce_probe_vmm docs/results/2026-11-30-h200-s12/e/ce_probe_vmm.cu -lcuda && timeout 60 /tmp/ce_probe_vmm | tee $R/ce_probe_vmm.txt
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 150
suite suite1 "2 4 8" 200 CUDA_VISIBLE_DEVICES=0
export WEFT_BACKEND=cuda
for rep in 1 2; do
  c=0; [ $rep = 1 ] && c=1
  for mode in stores ce loads; do
    case $mode in stores) e="";; ce) e="WEFT_CUDA_COPY_ENGINE=1";; loads) e="WEFT_REMOTE_STORES=0";; esac
    env $e timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_to_all -b 1M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/a_${mode}_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $mode rep $rep"
  done
  timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all_to_all -b 1M -e 1G -f 4 -n 10 -w 3 -c $c --json $R/a_nccl_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL nccl rep $rep"
  echo "rep $rep ($(el))"; snap
done
echo "== done ($(el))"
python3 scratch/s13/tab.py $R a stores ce loads nccl | tee $R/table.txt; snap
