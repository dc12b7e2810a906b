#!/bin/bash
# Session 10, device call D (1 x H200): host phases of first-use's all-reduces (scratch
# trace10.patch: trace.patch of session 5 on 45a5b39), 16 MiB and 64 KiB, sleep gaps, 4 ranks MPS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
patch -p1 < scratch/trace10.patch > $R/patch.log || { cat $R/patch.log; exit 1; }
(cmake -S . -B build-trace -DWEFT_CUDA=ON > $R/cmake.log 2>&1 && cmake --build build-trace -j16 --target first-use weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
echo "== build ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for z in 16M 64K; do for k in sleep spin; do
  mkdir -p $R/t/trace_${k}$z
  TRACE_DIR=$R/t/trace_${k}$z WEFT_BACKEND=cuda timeout 150 build-trace/weftrun -n 4 --grace 5 build-trace/first-use -m roa -s $z -g 10,100 -r 9 --gap-kind $k > $R/first_use_${k}$z.log 2>&1; echo "first-use $k $z rc=$? ($(el))"
  grep -v "^#" $R/first_use_${k}$z.log
done; done
echo quit | nvidia-cuda-mps-control
python3 scratch/trace_phases.py $R/t sleep16M spin16M sleep64K spin64K | tee $R/phases.txt
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
