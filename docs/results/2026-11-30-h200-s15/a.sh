#!/bin/bash
# Session 15, call A (2 x H200), main at be8fd0b:
# 1. GPU suite on both GPUs (2/4 ranks) and on one GPU (2/4/8, MPS): be8fd0b's harness helper
#    mp_expect_twoshot_stores never ran on a GPU; memcheck gpu_moe on one GPU was NOT-RUN for 4c4c1a8.
# 2. Two-shot all-reduce's store form with ranks sharing one GPU above 128 MiB (never measured):
#    4 and 8 ranks under MPS, 128 MiB - 1 GiB, stores (default) against WEFT_REMOTE_STORES=0,
#    in and out of place, two repetitions alternated; then 256 MiB checked exactly (-c 1).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 160
suite suite1 "2 4 8" 230 CUDA_VISIBLE_DEVICES=0
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60 CUDA_VISIBLE_DEVICES=0
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
B() { timeout 60 build-gpu/weftrun "$@" > /dev/null 2>> $R/err.log || echo "FAIL $* rc $?"; }
for rep in 1 2; do
  for n in 4 8; do
    for st in auto 0; do
      [ $(( $(date +%s) - t0 )) -gt 520 ] && break 3
      WEFT_REMOTE_STORES=$st B -n $n build-gpu/weft-bench -t all_reduce -b 128M -e 1G -f 2 -n 10 -w 3 -c 0 --json $R/s${n}_st${st}_r$rep.json
    done
  done
  echo "rep $rep ($(el))"; snap
done
for n in 4 8; do
  [ $(( $(date +%s) - t0 )) -gt 540 ] && break
  B -n $n build-gpu/weft-bench -t all_reduce -b 256M -e 256M -n 2 -w 1 -c 1 --json $R/c${n}_r1.json && echo "check $n ranks 256M: $(grep -o '"wrong":[0-9]*' $R/c${n}_r1.json | sort | uniq -c | tr '\n' ' ')"
done
echo quit | nvidia-cuda-mps-control
for n in 4 8; do python3 scratch/s15/tab.py $R s$n stauto st0 | tee $R/table_s$n.txt; done; snap
echo "== done ($(el))"
