#!/bin/bash
# Session 8, device call D (1 x H200): does binding each rank to cores change the 64 KiB first
# call after an idle gap? first-use roa 64K,16M, gaps 10,100, sleep|busy, push on|off,
# unbound / 1 core per rank / 4 cores per rank.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
lscpu > $R/lscpu.txt
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
FU=$PWD/build-gpu/first-use
for rep in 1 2; do
for pin in none core1 core4; do
  case $pin in
    none) wrap=() ;;
    core1) wrap=(sh -c 'exec taskset -c $((4*LOCAL_RANK+1)) "$0" "$@"') ;;
    core4) wrap=(sh -c 'exec taskset -c $((4*LOCAL_RANK))-$((4*LOCAL_RANK+3)) "$0" "$@"') ;;
  esac
  for push in 64K 0; do
    for kind in sleep busy; do
      f=$R/fu_${pin}_push${push}_${kind}_$rep.log
      WEFT_CUDA_PUSH_BYTES=$push timeout 60 build-gpu/weftrun -n 4 --grace 5 "${wrap[@]}" $FU -m roa -s 64K,16M -g 10,100 -r 7 --gap-kind $kind > $f 2>&1 || echo "FAIL $f"
      awk -v t="$pin push=$push $kind r$rep" '$1=="roa"{printf "%-28s %9s %4s first %6.1f steady %6.1f after %6.1f f/s %5s f/a %5s h %5s/%5s\n", t,$2,$3,$4,$5,$6,$7,$8,$14,$15}' $f
    done
  done
done
done
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
