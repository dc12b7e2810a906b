#!/bin/bash
# Session 21, call D (1 x H200): weft-bench after its review fixes (53c929f): build with the CUDA
# backend and NCCL (PyTorch's wheel); weft-bench on 2 ranks under MPS: uint8 sum all-reduce
# (verified twice, two poison bytes) and all-to-all / all-to-allv (all-to-allv's busbw factor);
# weft-bench-nccl with one rank (NCCL refuses two ranks on one GPU; only one GPU was lent):
# float sum (checked) and half sum (refused unless -c 0, then timed).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$(bash bench/nccl_root.sh) > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target weftrun weft-bench weft-bench-nccl > $R/build.log 2>&1) || { tail -30 $R/build.log; tar czf $OUT/results.tgz -C /tmp res; exit 1; }
echo "== build ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/d-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/d-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
b=build-gpu
run() { local tag=$1 n=$2; shift 2; timeout 60 $b/weftrun -n $n "$@" > $R/$tag.log 2>&1; echo "$tag rc=$?: $(grep -E '^ +[0-9]+ ' $R/$tag.log | awk '{printf "%s:%s/%s(w%s) ", $1, $6, $8, $9}') $(grep 'Out of bounds' $R/$tag.log)"; }
run u8 2 $b/weft-bench -t all_reduce -d uint8 -b 1K -e 1M -f 32 -n 20 -w 3
run a2a 2 $b/weft-bench -t all_to_all -t all_to_allv -b 1M -e 16M -f 16 -n 20 -w 3 --inplace 0
run nccl_f 1 $b/weft-bench-nccl -t all_reduce -b 1K -e 1M -f 32 -n 20 -w 3
run nccl_h 1 $b/weft-bench-nccl -t all_reduce -d half -b 1K -e 1M -f 32 -n 20 -w 3
run nccl_h0 1 $b/weft-bench-nccl -t all_reduce -d half -b 1K -e 1M -f 32 -n 20 -w 3 -c 0
grep -h "weft-bench-nccl:" $R/nccl_h.log | head -2
echo quit | nvidia-cuda-mps-control
tar czf $OUT/results.tgz -C /tmp res; echo "== done ($(el))"
