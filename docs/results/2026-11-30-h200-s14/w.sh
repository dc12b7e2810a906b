#!/bin/bash
# Session 14, call 6: verify 4c4c1a8's large two-shot all-reduce (loads from 256 MiB across GPUs;
# two ranks out of place two-shot) exactly, in and out of place, 256 MiB and 1 GiB.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $OUT/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weft-bench weftrun > $OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
echo "== build ok ($(el))"
timeout 150 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce -b 256M -e 1G -f 4 -n 2 -w 1 -c 1 --json $OUT/check.json 2>&1 | tee $OUT/check.log | tail -8
echo "rc ${PIPESTATUS[0]} ($(el))"
