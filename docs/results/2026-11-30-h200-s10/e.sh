#!/bin/bash
# Session 10, device call E (2 x H200): all-reduce one-shot vs two-shot across two GPUs, 2 ranks
# (one per GPU) and 4 ranks (two per GPU, MPS), in and out of place, 128K-16M, 3 repetitions
# alternated. Scratch twoshot_n2.patch lets 2 ranks out of place take two-shot when told to.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi topo -m > $R/topo.txt 2>&1; head -3 $R/topo.txt
patch -p1 < scratch/twoshot_n2.patch > $R/patch.log || { cat $R/patch.log; exit 1; }
(cmake -S . -B build-x -DWEFT_CUDA=ON > $R/cmake.log 2>&1 && cmake --build build-x -j32 --target weft-bench weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; exit 1; }
patch -R -p1 < scratch/twoshot_n2.patch >> $R/patch.log
echo "== build ok ($(el))"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for rep in 1 2 3; do for n in 2 4; do for form in one two; do
  T=1T; [ $form = two ] && T=128K
  c=0; [ $rep = 1 ] && c=1
  WEFT_ALLREDUCE_TWOSHOT_BYTES=$T WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES=$T timeout 120 build-x/weftrun -n $n build-x/weft-bench -t all_reduce -b 128K -e 16M -f 2 -n 30 -w 5 -c $c --json $R/ar_n${n}_${form}_r$rep.json > $R/ar_n${n}_${form}_r$rep.log 2>&1 || echo "FAIL n=$n $form rep $rep"
done; done; echo "rep $rep done ($(el))"; done
echo quit | nvidia-cuda-mps-control
head -c 600 $R/ar_n2_one_r1.json; echo; grep -v "^#" $R/ar_n2_one_r1.log | head -20
tar czf $OUT/results.tgz -C /tmp res
echo "== done ($(el))"
