#!/bin/bash
# Session 6, device call A (1 x H200): all-gather traffic probe; check of main (GPU unit tests,
# suite at 2/4/8 ranks, Python GPU tests); push/mesh crossover at 4 ranks.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
nvcc -arch=sm_90 -O3 -o /tmp/ag_probe scratch/ag_probe.cu && /tmp/ag_probe > $R/ag_probe.log 2>&1; cat $R/ag_probe.log
echo "== probe ($(el))"
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -3 $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=280 timeout 295 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for t in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  for p in 0 16M; do
    WEFT_CUDA_PUSH_BYTES=$p WEFT_BACKEND=cuda timeout 60 build-gpu/weftrun -n 4 --grace 5 build-gpu/weft-bench -t $t -b 32K -e 4M -f 2 -n 30 -w 5 --inplace 0 > $R/x_${t}_p$p.log 2>&1 || echo "bench $t p$p rc=$?"
  done
done
echo quit | nvidia-cuda-mps-control
echo "== crossover ($(el))"
for t in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  echo "# $t: size mesh_us push_us"
  join <(grep -vE '^#' $R/x_${t}_p0.log | awk 'NF>8{print $1, $6, $9}') <(grep -vE '^#' $R/x_${t}_p16M.log | awk 'NF>8{print $1, $6, $9}') | awk '{printf "%10d %8.1f %8.1f  wrong %d/%d\n", $1, $2, $4, $3, $5}'
done
snap
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index --find-links scratch/wheels pytest > $R/pip.log 2>&1
left=$(( 560 - $(date +%s) + t0 ))
RUN_GPU_STEPS="pytest example" timeout $left bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -5 $R/py.log
grep -h "passed\|failed" $R/py/*.log | tail -3
snap
echo "== done ($(el))"
