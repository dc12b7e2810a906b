#!/bin/bash
# Session 15, call E (2 x H200): main with 6db5b3a (no entry launch before a continued step's
# copy-engine copies) and the Python fixes (993893e): GPU suite on one GPU (2/4/8, MPS; its
# copy-engine runs take that path), the Python GPU pytest step, and the two-shot all-reduce
# across both GPUs at 256 MiB and 1 GiB (its gather on the copy engines) verified, then timed.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
CUDA_VISIBLE_DEVICES=0 GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=240 timeout 255 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/suite1/summary.txt | head -5
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c; snap
export WEFT_BACKEND=cuda
timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce -b 256M -e 1G -f 4 -n 2 -w 1 -c 1 --json $R/check.json > /dev/null 2>> $R/err.log || echo "FAIL check"
echo "check: $(grep -o '"wrong":[0-9a-z]*' $R/check.json | sort | uniq -c | tr '\n' ' ') ($(el))"
timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce -b 256M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/s_weft_r1.json > /dev/null 2>> $R/err.log || echo "FAIL time"
python3 scratch/s15/tab.py $R s weft | tee $R/table.txt; snap
unset WEFT_BACKEND
RUN_GPU_STEPS=pytest timeout 160 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -3 $R/py.log; snap
echo "== done ($(el))"
