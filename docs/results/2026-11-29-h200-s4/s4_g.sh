#!/bin/bash
# Session 4, call G (2 x H200): the final auto rule (bytes the rank copies, communicator spans GPUs).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weftrun weft-bench gpu_collectives > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for coll in all_gather all_to_all broadcast; do
  timeout 120 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $coll -b 16M -e 1G -f 2 -n 10 -w 3 -c 0 --inplace 0 --json $R/auto_${coll}.json > $R/auto_${coll}.log 2>&1 || echo "FAILED $coll"
done
echo "== sweep done ($(el))"
timeout 120 build-gpu/weftrun -n 2 build-gpu/tests/gpu/gpu_collectives > $R/coll2_auto.log 2>&1; echo "gpu_collectives n=2 auto rc=$? ($(el))"; tail -2 $R/coll2_auto.log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
timeout 150 build-gpu/weftrun -n 4 build-gpu/tests/gpu/gpu_collectives > $R/coll4_auto.log 2>&1; echo "gpu_collectives n=4 on 2 GPUs auto rc=$? ($(el))"; tail -2 $R/coll4_auto.log
echo quit | nvidia-cuda-mps-control
snap
for coll in all_gather all_to_all broadcast; do echo "-- $coll auto"; grep -vE "^#" $R/auto_${coll}.log | awk '{print $1, $6}' | tr '\n' ';'; echo; done
echo "== done ($(el))"
