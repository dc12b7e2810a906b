#!/bin/bash
# Session 4, device call B: is the idle cost the first copy-engine submission after a gap?
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
nvcc -O2 -arch=sm_90 -o /tmp/idle_probe scratch/idle_probe.cu || exit 1
/tmp/idle_probe 10 30 65536 | tee $R/probe2_alone_64k.txt
/tmp/idle_probe 10 10 67108864 | grep -v "gap spin\|gap busy" | tee $R/probe2_alone_64m.txt
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for i in 0 1 2 3; do /tmp/idle_probe 10 30 65536 > $R/probe2_mps4_$i.txt & done; wait
cat $R/probe2_mps4_*.txt
echo quit | nvidia-cuda-mps-control
tar czf $OUT/results.tgz -C /tmp res
