#!/bin/bash
# Session 4, device call D (1 x H200): short kernel parameter for launches with <= 32 units.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
rm -rf /tmp/base && mkdir /tmp/base && cp -r CMakeLists.txt cmake src include tools bench tests python examples /tmp/base/ 2>/dev/null; cp scratch/base/exec_cuda.* /tmp/base/src/exec/
(cmake -S /tmp/base -B /tmp/base/build -DWEFT_CUDA=ON > $R/cmake_base.log 2>&1 && cmake --build /tmp/base/build -j8 --target weftrun weft-bench first-use > $R/build_base.log 2>&1) &
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
wait; ls /tmp/base/build/weft-bench || tail $R/build_base.log
echo "== build ok ($(el))"
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -5; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
W="build-gpu/weftrun -n 4 --grace 5"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for b in build-gpu /tmp/base/build; do t=new; [ $b = build-gpu ] || t=base
WB="build-gpu/weftrun -n 4 --grace 5 $b/weft-bench"
timeout 60 $WB -t all_reduce -b 8 -e 1M -f 4 -n 200 -w 20 --inplace 1 > $R/ar_inplace_$t.log 2>&1; echo "ar inplace $t rc=$? ($(el))"
timeout 90 $WB -t all_reduce -b 8 -e 64M -f 8 -n 50 -w 5 --inplace 0 > $R/ar_oop_$t.log 2>&1; echo "ar oop $t rc=$? ($(el))"
timeout 90 $WB -t all_gather -b 1K -e 64M -f 8 -n 50 -w 5 --inplace 0 > $R/ag_roa_$t.log 2>&1; echo "ag roa $t rc=$? ($(el))"
timeout 90 $WB -t all_gather -b 1K -e 64M -f 8 -n 50 -w 5 --inplace 0 --registration staged > $R/ag_staged_$t.log 2>&1; echo "ag staged $t rc=$? ($(el))"
done
snap
for kind in sleep busy; do
  timeout 100 $W build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 7 --gap-kind $kind --json $R/first_use_$kind.json > $R/first_use_$kind.log 2>&1; echo "first-use $kind rc=$? ($(el))"
done
echo quit | nvidia-cuda-mps-control
snap
for f in ar_inplace ar_oop ag_roa ag_staged; do for t in new base; do echo "-- $f $t"; grep -vE "^#" $R/${f}_$t.log | awk '{print $1, $6}' | tr '\n' ';'; echo; done; done
grep -hvE "^# (times|buffer|of the|ranks, med|meets|h_first|first-use)" $R/first_use_*.log | cut -c1-190
echo "== done ($(el))"
