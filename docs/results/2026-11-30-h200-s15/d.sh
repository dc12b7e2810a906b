#!/bin/bash
# Session 15, call D (2 x H200, warm after C): the Python GPU pytest step, the `make run` job on
# the CUDA backend, and every collective 16 MiB - 1 GiB beside NCCL (one repetition, -c 0) to
# check that the review fixes cost nothing on the timed path.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
cmake --build build-gpu -j32 > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
RUN_GPU_STEPS=pytest timeout 170 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -4 $R/py.log; snap
timeout 60 bash bench/run.sh build-gpu 2 > $R/make_run.log 2>&1; echo "make run job rc=$? ($(el))"; tail -2 $R/make_run.log; snap
export WEFT_BACKEND=cuda
timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/s_weft_r1.json > /dev/null 2>> $R/err.log || echo "FAIL weft"
timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/s_nccl_r1.json > /dev/null 2>> $R/err.log || echo "FAIL nccl"
python3 scratch/s15/tab.py $R s weft nccl | tee $R/table.txt; snap
echo "== done ($(el))"
