#!/bin/bash
# Session 22, call E (1 x H200): HEAD (the partitioner's unit bound, which the CUDA launch's
# split also goes through; weft_torch_free of a foreign pointer; the all_to_allv block-wise
# overlap check; weft_malloc's size bound). Build HEAD and the commit before 6ecbc36 (before the torch fix, 6ecbc36~) with
# HEAD's tests/gpu; gpu_registration n=2 under MPS with each (its torch_free_foreign case must
# fail on the old library); CTest unit; the GPU suite (2/4/8 ranks under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s22/old_torch.tgz -C /tmp/old && cp tests/gpu/*.c tests/gpu/*.h /tmp/old/tests/gpu/ &&
(cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j16 --target weftrun gpu_registration > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
echo "== old build ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/e-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/e-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for tb in old:/tmp/old/b new:build-gpu; do
  tag=${tb%%:*}; b=${tb#*:}
  WEFT_BACKEND=cuda WEFT_TIMEOUT_S=30 timeout 120 $b/weftrun --grace 15 -n 2 -- $b/tests/gpu/gpu_registration > $R/reg_$tag.log 2>&1
  echo "gpu_registration $tag rc=$?: $(grep -hE '^(PASS|FAIL)' $R/reg_$tag.log | cut -c1-220 | sort | uniq -c | head -4 | tr '\n' ' ')"
done
echo quit | nvidia-cuda-mps-control; sleep 1
snap
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 270 bash tests/gpu/run.sh build-gpu $R/suite1 > $R/suite1.log 2>&1
echo "suite1 rc=$? ($(el))"; tail -1 $R/suite1/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite1/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite1/gpu-tests.log | sort | uniq -c
snap; echo "== done ($(el))"
