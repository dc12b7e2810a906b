#!/bin/bash
# Session 23, call B (1 x H200): HEAD's Python GPU step (python/tests/run_gpu.sh); small-message
# all-reduce latency, 4 ranks under MPS, old (bd7e258, before the arrival fence of 644cf6a) and
# new, interleaved 3 times; the `make run` job on the CUDA backend.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s23/old.tgz -C /tmp/old &&
(cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j16 --target weftrun weft-bench > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
echo "== old build ($(el))"
timeout 300 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python gpu rc=$? ($(el))"; tail -5 $R/py.log
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/b-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/b-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for rep in 1 2 3; do
  for tb in old:/tmp/old/b new:build-gpu; do
    tag=${tb%%:*}; b=${tb#*:}
    WEFT_BACKEND=cuda timeout 60 $b/weftrun -n 4 --grace 5 $b/weft-bench -t all_reduce -b 8 -e 1M -f 8 -n 2000 -w 200 -c 0 > $R/lat_${tag}_$rep.log 2>&1
    echo "lat $tag rep $rep rc=$?"
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1
echo "== latency ($(el))"
snap
timeout 150 make run > $R/make_run.log 2>&1; echo "make run rc=$? ($(el))"; tail -3 $R/make_run.log
snap; echo "== done ($(el))"
