#!/bin/bash
# Session 17, call B (2 x H200, warm; tab.py is docs/results/2026-11-30-h200-s15/tab.py): GPU suite on one GPU
# (2/4/8, MPS, memcheck); first use after allocation, roa and jit, 4 ranks on one GPU (MPS); every
# collective at 16 MiB and 1 GiB beside NCCL across both GPUs (one repetition, -c 0); the make run job.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/suite1/summary.txt | head -5
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c; snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log
CUDA_VISIBLE_DEVICES=0 nvidia-cuda-mps-control -d
for m in roa jit; do
  CUDA_VISIBLE_DEVICES=0 WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m $m -s 64K,16M -g 10,100 -r 5 --json $R/first_use_$m.json > $R/first_use_$m.log 2>&1; echo "first-use $m rc=$? ($(el))"
  grep -v "^#" $R/first_use_$m.log | head -8
done
echo quit | nvidia-cuda-mps-control
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
snap
export WEFT_BACKEND=cuda
timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 16M -e 1G -f 64 -n 10 -w 3 -c 0 --json $R/s_weft_r1.json > /dev/null 2>> $R/err.log || echo "FAIL weft"
timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 16M -e 1G -f 64 -n 10 -w 3 -c 0 --json $R/s_nccl_r1.json > /dev/null 2>> $R/err.log || echo "FAIL nccl"
timeout 60 bash bench/run.sh build-gpu 2 > $R/make_run.log 2>&1; echo "make run job rc=$? ($(el))"; tail -2 $R/make_run.log
python3 scratch/s15/tab.py $R s weft nccl | tee $R/table.txt; snap
echo "== done ($(el))"
