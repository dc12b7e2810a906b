#!/bin/bash
# Session 14, call 4: two-shot all-reduce, store form against loads, by size; 2 ranks on two
# GPUs (in place; out of place with two-shot forced, against one-shot) and 4 ranks on two GPUs
# (MPS), in place.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 --target weft-bench weftrun > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
B() { local n=$1; shift; timeout 60 build-gpu/weftrun -n $n build-gpu/weft-bench -t all_reduce -n 10 -w 3 -c 0 "$@" > /dev/null 2>> $R/err.log || echo "FAIL $n $* rc $?"; }
for rep in 1 2; do
  B 2 -b 4M -e 1G -f 2 --inplace 1 --json $R/i2_st_r$rep.json
  WEFT_REMOTE_STORES=0 B 2 -b 4M -e 1G -f 2 --inplace 1 --json $R/i2_ld_r$rep.json
  B 2 -b 4M -e 1G -f 2 --inplace 0 --json $R/o2_one_r$rep.json
  WEFT_ALLREDUCE_TWOSHOT_BYTES=0 B 2 -b 4M -e 1G -f 2 --inplace 0 --json $R/o2_st_r$rep.json
  WEFT_ALLREDUCE_TWOSHOT_BYTES=0 WEFT_REMOTE_STORES=0 B 2 -b 4M -e 1G -f 2 --inplace 0 --json $R/o2_ld_r$rep.json
  echo "rep $rep 2 ranks ($(el))"; snap
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for rep in 1 2; do
  B 4 -b 16M -e 1G -f 4 --json $R/x4_st_r$rep.json
  WEFT_REMOTE_STORES=0 B 4 -b 16M -e 1G -f 4 --json $R/x4_ld_r$rep.json
  echo "rep $rep 4 ranks ($(el))"; snap
done
echo quit | nvidia-cuda-mps-control
python3 scratch/s14/tab.py $R i2 st ld | tee $R/table_i2.txt
python3 scratch/s14/tab.py $R o2 one st ld | tee $R/table_o2.txt
python3 scratch/s14/tab.py $R x4 st ld | tee $R/table_x4.txt; snap
echo "== done ($(el))"
