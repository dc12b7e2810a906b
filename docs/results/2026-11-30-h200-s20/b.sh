#!/bin/bash
# Session 20, call B (2 x H200): HEAD after the review fixes (CUDA: no closing signal after a
# failed launch, destroy reports unreported kernel failures; MoE handle lifetime and caps; bench
# data; Python). Build HEAD; build a388370 (before the CUDA fix) with HEAD's gpu_late.c; gpu_late
# on both (old must fail, new pass); weft-bench small all-reduce old vs new (the kernel's added
# device load); CTest unit; GPU suite on both GPUs (2/4) and on one (2/4/8 under MPS, memcheck).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1 2>/dev/null; } > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s20/old.tgz -C /tmp/old && cp tests/gpu/gpu_late.c tests/gpu/CMakeLists.txt /tmp/old/tests/gpu/ &&
(cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j32 --target weftrun gpu_late weft-bench > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
echo "== old build ($(el))"
late() { # tag build variant [env]
  local tag=$1 b=$2 v=$3; shift 3
  env "$@" WEFT_BACKEND=cuda WEFT_TIMEOUT_S=3 timeout 60 $b/weftrun --grace 10 -n 2 -- $b/tests/gpu/gpu_late $v > $R/late_${tag}_$v.log 2>&1
  echo "gpu_late $tag $v rc=$? : $(grep -hE '^(PASS|FAIL)' $R/late_${tag}_$v.log | cut -c1-150 | sort | uniq -c | tr '\n' ' ')"
}
late new build-gpu all_reduce; late new build-gpu all_gather WEFT_CUDA_COPY_ENGINE=1
late old /tmp/old/b all_reduce; late old /tmp/old/b all_gather WEFT_CUDA_COPY_ENGINE=1
snap
for i in 1 2; do for tb in old:/tmp/old/b new:build-gpu; do
  tag=${tb%%:*}; b=${tb#*:}
  WEFT_BACKEND=cuda timeout 60 $b/weftrun -n 2 $b/weft-bench -t all_reduce -b 8 -e 64K -f 8 -n 300 -w 50 > $R/bench_${tag}_$i.log 2>&1
done; done
echo "== bench ($(el))"; for f in $R/bench_*; do echo "$f: $(grep -E '^ +(8|512|32768|65536) ' $f | awk '{printf "%s:%s ", $1, $6}')"; done
(cd build-gpu && timeout 100 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -8
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 140
suite suite1 "2 4 8" 190 CUDA_VISIBLE_DEVICES=0
echo "== done ($(el))"
