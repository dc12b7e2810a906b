#!/bin/bash
# Session 6, device call B (1 x H200): all-gather's store form. GPU unit tests (fan-out copy),
# the suite at 2/4/8 ranks, then weft-bench all_gather at 4 ranks under MPS: roa with stores
# (default), roa with WEFT_ALLGATHER_STORES=0 (loads), staged; interleaved, twice.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1; git status --short > $R/status.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -3 $R/ctest_unit.log; grep -h "test_reduce_cuda:" Testing/Temporary/LastTest.log | tail -2)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for rep in 1 2; do
  for m in stores loads staged; do
    reg=roa; st=auto; [ $m = loads ] && st=0; [ $m = staged ] && reg=staged
    WEFT_ALLGATHER_STORES=$st WEFT_BACKEND=cuda timeout 90 build-gpu/weftrun -n 4 --grace 5 build-gpu/weft-bench -t all_gather -b 1M -e 256M -f 2 -n 20 -w 5 --registration $reg > $R/ag_${m}_$rep.log 2>&1 || echo "bench $m $rep rc=$?"
  done
done
echo quit | nvidia-cuda-mps-control
echo "== bench ($(el))"
for rep in 1 2; do
  echo "# rep $rep: size | out of place: stores loads staged staged/stores | in place: stores loads staged staged/stores | wrong"
  paste <(grep -vE '^#' $R/ag_stores_$rep.log | awk 'NF>8{print $1, $6, $10, $9+$13}') <(grep -vE '^#' $R/ag_loads_$rep.log | awk 'NF>8{print $6, $10, $9+$13}') <(grep -vE '^#' $R/ag_staged_$rep.log | awk 'NF>8{print $6, $10, $9+$13}') | awk '{printf "%10d | %7.1f %7.1f %7.1f %5.2f | %7.1f %7.1f %7.1f %5.2f | %d\n", $1, $2, $5, $8, $8/$2, $3, $6, $9, $9/$3, $4+$7+$10}'
done
snap
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=300 timeout 315 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
grep -h "FAIL" $R/suite/gpu-tests.log | head -5
snap
echo "== done ($(el))"
