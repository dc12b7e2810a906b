#!/bin/bash
# Session 6, device call C (2 x H200 over NVLink, one rank per GPU): all-gather's store form
# across GPUs. GPU suite at 2 and 4 ranks, then weft-bench all_gather: stores (default: copy
# engines from 64 MiB per rank), stores on SMs only (WEFT_CUDA_COPY_ENGINE=0), loads on SMs
# only, NCCL; interleaved, twice.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/machine.txt 2>&1
git log --oneline -1 > $R/commit.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for rep in 1 2; do
  for m in stores stores_sm loads_sm nccl; do
    prog=weft-bench; [ $m = nccl ] && prog=weft-bench-nccl
    st=auto; [ $m = loads_sm ] && st=0
    ce=auto; [ $m != stores ] && [ $m != nccl ] && ce=0
    WEFT_ALLGATHER_STORES=$st WEFT_CUDA_COPY_ENGINE=$ce timeout 90 build-gpu/weftrun -n 2 build-gpu/$prog -t all_gather -b 1M -e 1G -f 4 -n 20 -w 5 > $R/ag_${m}_$rep.log 2>&1 || echo "bench $m $rep rc=$?"
  done
done
echo "== bench ($(el))"
for rep in 1 2; do
  echo "# rep $rep: size | out of place: stores stores_sm loads_sm nccl | in place: stores stores_sm loads_sm nccl | wrong"
  paste <(grep -vE '^#' $R/ag_stores_$rep.log | awk 'NF>8{print $1, $6, $10, $9+$13}') <(grep -vE '^#' $R/ag_stores_sm_$rep.log | awk 'NF>8{print $6, $10, $9+$13}') <(grep -vE '^#' $R/ag_loads_sm_$rep.log | awk 'NF>8{print $6, $10, $9+$13}') <(grep -vE '^#' $R/ag_nccl_$rep.log | awk 'NF>8{print $6, $10, $9+$13}') | awk '{printf "%10d | %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f %8.1f | %d\n", $1, $2, $5, $8, $11, $3, $6, $9, $12, $4+$7+$10+$13}'
done
snap
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=200 timeout 215 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
grep -h "FAIL" $R/suite/gpu-tests.log | head -5
snap
echo "== done ($(el))"
