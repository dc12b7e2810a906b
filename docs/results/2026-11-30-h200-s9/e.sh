#!/bin/bash
# Session 9, device call E (2 x H200): the copy-engine path's copies within a GPU on a side
# stream (uncommitted): unit tests, GPU suite at 2 ranks (gpu_collectives and gpu_graph with
# WEFT_CUDA_COPY_ENGINE=1 included), then out-of-place all-gather 64 MiB - 1 GiB: SM store form
# (auto) against the copy engines (1), alternated twice.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git diff > $R/uncommitted.diff
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 100 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2" GPU_TEST_BUDGET_S=150 timeout 160 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt; grep "copy engine" $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export WEFT_BACKEND=cuda
for rep in 1 2; do for ce in auto 1; do
  echo "== rep $rep WEFT_CUDA_COPY_ENGINE=$ce"
  WEFT_CUDA_COPY_ENGINE=$ce timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_gather -b 64M -e 1G -f 2 -n 10 -w 2 --inplace 0 -c 0 > $R/ag_${ce}_$rep.log 2>&1 || echo "rc=$?"
  grep -E "^ +[0-9]" $R/ag_${ce}_$rep.log | awk '{print $1, $6, $10}'
done; done
snap
echo "== done ($(el))"
