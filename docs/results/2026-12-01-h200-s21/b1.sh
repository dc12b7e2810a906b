#!/bin/bash
# Session 21, call B1 (2 x H200): HEAD after the review fixes. Build HEAD, and 54ebe93 (before
# the provider kept no process-wide device and before the all_to_allv pair digest) with HEAD's
# gpu_registration.c; gpu_registration n=2 on both GPUs with each (its new last case, a
# communicator on the other GPU, must fail on the old library and pass on the new); small
# all_to_allv latency old vs new (the host agreement round the digest replaced); CTest unit;
# GPU suite on both GPUs (2/4 ranks).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s21/old.tgz -C /tmp/old && cp tests/gpu/gpu_registration.c /tmp/old/tests/gpu/ &&
(cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j32 --target weftrun gpu_registration weft-bench > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
echo "== old build ($(el))"
for tb in old:/tmp/old/b new:build-gpu; do
  tag=${tb%%:*}; b=${tb#*:}
  WEFT_BACKEND=cuda WEFT_TIMEOUT_S=30 timeout 120 $b/weftrun --grace 15 -n 2 -- $b/tests/gpu/gpu_registration > $R/reg_$tag.log 2>&1
  echo "gpu_registration $tag rc=$?: $(grep -hE '^(PASS|FAIL)' $R/reg_$tag.log | cut -c1-220 | sort | uniq -c | head -4 | tr '\n' ' ')"
done
snap
for i in 1 2; do for tb in old:/tmp/old/b new:build-gpu; do
  tag=${tb%%:*}; b=${tb#*:}
  WEFT_BACKEND=cuda timeout 60 $b/weftrun -n 2 $b/weft-bench -t all_to_allv -b 8 -e 64K -f 8 -n 300 -w 50 -c 1 > $R/a2av_${tag}_$i.log 2>&1
  echo "a2av $tag $i: $(grep -E '^ +[0-9]+ ' $R/a2av_${tag}_$i.log | awk '{printf "%s:%s(w%s) ", $1, $6, $9}')"
done; done
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=300 timeout 315 bash tests/gpu/run.sh build-gpu $R/suite2 > $R/suite2.log 2>&1
echo "suite2 rc=$? ($(el))"; tail -1 $R/suite2/summary.txt; grep "FAIL\|NOT-RUN\|TIMEOUT" $R/suite2/summary.txt | head -8
grep -h "ERROR SUMMARY" $R/suite2/gpu-tests.log | sort | uniq -c; grep -h "other GPU" $R/suite2/gpu-tests.log | sort | uniq -c | head
snap; echo "== done ($(el))"
