#!/bin/bash
# Session 10, device call B (1 x H200): scratch cold-launch with a launch + synchronise of
# another kernel between the gap and the timed launch (as first-use's barrier), 1 and 4 MPS clients.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
nvcc -O2 -arch=sm_90 -std=c++14 scratch/cold_launch.cu -lcuda -o /tmp/cold_launch > $R/cold_build.log 2>&1 || cat $R/cold_build.log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
echo "== MPS, 1 client, prewarm"; /tmp/cold_launch 21 1 | tee $R/cold_mps1_pre.txt
echo "== MPS, 4 clients, prewarm (client 0 shown)"
for i in 1 2 3; do /tmp/cold_launch 21 1 > $R/cold_mps4_pre_$i.txt & done; /tmp/cold_launch 21 1 | tee $R/cold_mps4_pre_0.txt; wait
echo quit | nvidia-cuda-mps-control
tar czf $OUT/results.tgz -C /tmp res
