#!/bin/bash
# Session 5, device call F (2 x H200, one rank per GPU): where a small call's time goes across
# GPUs. Host phases of weft-bench's timed all-reduces (trace.patch build), next to untraced
# weft-bench, weft's barrier and NCCL in the same run.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
rm -rf /tmp/tr && mkdir /tmp/tr && cp -r CMakeLists.txt cmake src include tools bench tests python examples /tmp/tr/ 2>/dev/null
(cd /tmp/tr && patch -p1 < $OLDPWD/scratch/trace.patch > $R/patch.log 2>&1 && cmake -S /tmp/tr -B /tmp/tr/build -DWEFT_CUDA=ON > $R/cmake_tr.log 2>&1 && cmake --build /tmp/tr/build -j16 --target weftrun weft-bench > $R/build_tr.log 2>&1) &
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target weftrun weft-bench weft-bench-nccl > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
wait; ls /tmp/tr/build/weft-bench > /dev/null || { tail $R/patch.log $R/build_tr.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
B="-b 8 -e 65536 -f 8192 -n 500 -w 50 --inplace 0"
for rep in 1 2; do
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce $B > $R/weft_$rep.log 2>&1
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all_reduce $B > $R/nccl_$rep.log 2>&1
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t barrier -n 500 -w 50 > $R/barrier_$rep.log 2>&1
  mkdir -p $R/trace_$rep
  TRACE_DIR=$R/trace_$rep timeout 60 /tmp/tr/build/weftrun -n 2 /tmp/tr/build/weft-bench -t all_reduce $B > $R/traced_$rep.log 2>&1
done
echo "== runs done ($(el))"
snap
for rep in 1 2; do
  echo "-- rep $rep: size weft nccl traced-weft | barrier $(grep -vE '^#' $R/barrier_$rep.log | awk '{print $6}')"
  paste <(grep -vE "^#" $R/weft_$rep.log | awk '{print $1, $6}') <(grep -vE "^#" $R/nccl_$rep.log | awk '{print $6}') <(grep -vE "^#" $R/traced_$rep.log | awk '{print $6}') | tr '\t' ' '
  python3 scratch/bench_phases.py $R/trace_$rep 2 500
done
echo "== done ($(el))"
