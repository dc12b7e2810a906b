#!/bin/bash
# Session 15, call B (2 x H200, warm after call A): the same comparison with 2 ranks on one GPU.
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60 CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p /tmp/mps-pipe /tmp/mps-log $OUT/res
nvidia-cuda-mps-control -d
for rep in 1 2; do for st in auto 0; do
  WEFT_REMOTE_STORES=$st timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce -b 128M -e 1G -f 2 -n 10 -w 3 -c 0 --json $OUT/res/s2_st${st}_r$rep.json > /dev/null || echo FAIL
done; done
echo quit | nvidia-cuda-mps-control
python3 scratch/s15/tab.py $OUT/res s2 stauto st0
