#!/bin/bash
# Session 5, device call B (1 x H200): the plan cache. GPU unit tests and suite, then A/B
# (WEFT_PLAN_CACHE_ENTRIES=0 | 8, alternating, same run): first-use after idle gaps, small-message
# weft-bench, and the host-phase trace (scratch/trace.patch) with the cache on and off.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
rm -rf /tmp/tr && mkdir /tmp/tr && cp -r CMakeLists.txt cmake src include tools bench tests python examples /tmp/tr/ 2>/dev/null
(cd /tmp/tr && patch -p1 < $OLDPWD/scratch/trace.patch > $R/patch.log 2>&1 && cmake -S /tmp/tr -B /tmp/tr/build -DWEFT_CUDA=ON > $R/cmake_tr.log 2>&1 && cmake --build /tmp/tr/build -j8 --target weftrun first-use > $R/build_tr.log 2>&1) &
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
wait; ls /tmp/tr/build/first-use || { tail $R/patch.log $R/build_tr.log; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -3 $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
W="build-gpu/weftrun -n 4 --grace 5"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for pass in 1 2; do for e in 0 8; do
  export WEFT_PLAN_CACHE_ENTRIES=$e
  for kind in sleep busy; do
    timeout 100 $W build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 7 --gap-kind $kind --json $R/fu_${kind}_e${e}_p$pass.json > $R/fu_${kind}_e${e}_p$pass.log 2>&1; echo "first-use $kind e=$e pass $pass rc=$? ($(el))"
  done
  timeout 60 $W build-gpu/weft-bench -t all_reduce -b 8 -e 1M -f 4 -n 200 -w 20 --inplace 1 > $R/ar_e${e}_p$pass.log 2>&1; echo "ar e=$e rc=$?"
  timeout 60 $W build-gpu/weft-bench -t all_gather -b 1K -e 16M -f 4 -n 200 -w 20 --inplace 0 > $R/ag_e${e}_p$pass.log 2>&1; echo "ag e=$e rc=$?"
done; done
snap
for e in 0 8; do
  mkdir -p $R/trace_e$e
  WEFT_PLAN_CACHE_ENTRIES=$e TRACE_DIR=$R/trace_e$e timeout 100 /tmp/tr/build/weftrun -n 4 --grace 5 /tmp/tr/build/first-use -m roa -s 64K -g 10,100 -r 7 --gap-kind sleep > $R/trace_e$e.log 2>&1; echo "trace e=$e rc=$? ($(el))"
done
echo quit | nvidia-cuda-mps-control
snap
for f in $R/fu_*_p2.log; do echo "-- $f"; grep -E "^ +roa" $f | cut -c1-200; done
for t in ar ag; do for e in 0 8; do echo "-- $t e=$e"; for p in 1 2; do grep -vE "^#" $R/${t}_e${e}_p$p.log | awk '{print $1, $6}' | tr '\n' ';'; echo; done; done; done
echo "== done ($(el))"
