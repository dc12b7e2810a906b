#!/bin/bash
# Session 4, device call C (1 x H200): the local copy fused into the collective kernel.
# Full GPU suite (2/4/8 ranks + memcheck), gpu_collectives with every copy fused, A/B benchmarks
# (WEFT_CUDA_FUSED_COPY_BYTES=0 is the old cudaMemcpyAsync path), first-use.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
tail -30 $R/suite/summary.txt 2>/dev/null | grep -v " PASS " ; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
W="build-gpu/weftrun -n 4 --grace 5"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
WEFT_CUDA_FUSED_COPY_BYTES=1G WEFT_TIMEOUT_S=30 timeout 120 $W build-gpu/tests/gpu/gpu_collectives > $R/coll_fused_all.log 2>&1; echo "gpu_collectives all fused rc=$? ($(el))"; tail -2 $R/coll_fused_all.log
for f in 0 1M; do
  WEFT_CUDA_FUSED_COPY_BYTES=$f timeout 60 $W build-gpu/weft-bench -t all_reduce -b 8 -e 1M -f 4 -n 200 -w 20 --inplace 1 > $R/ar_inplace_f$f.log 2>&1; echo "ar inplace fused=$f rc=$? ($(el))"
done
for f in 0 1M 1G; do
  WEFT_CUDA_FUSED_COPY_BYTES=$f timeout 60 $W build-gpu/weft-bench -t all_gather -b 1K -e 64M -f 8 -n 50 -w 5 --inplace 0 --registration staged > $R/ag_staged_f$f.log 2>&1; echo "ag staged fused=$f rc=$? ($(el))"
done
snap
for kind in sleep busy; do
  timeout 100 $W build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 7 --gap-kind $kind --json $R/first_use_$kind.json > $R/first_use_$kind.log 2>&1; echo "first-use $kind rc=$? ($(el))"
done
WEFT_CUDA_FUSED_COPY_BYTES=0 timeout 100 $W build-gpu/first-use -m roa -s 64K -g 10 -r 7 --gap-kind sleep --tag fused0 > $R/first_use_fused0.log 2>&1; echo "first-use fused0 rc=$? ($(el))"
echo quit | nvidia-cuda-mps-control
snap
paste <(grep -vE "^#" $R/ar_inplace_f0.log | awk '{print $1, $(NF-3)}') <(grep -vE "^#" $R/ar_inplace_f1M.log | awk '{print $(NF-3)}') | head -20
grep -vE "^#" $R/ag_staged_f0.log | head -3
for f in 0 1M 1G; do echo "-- ag staged fused=$f"; grep -vE "^#" $R/ag_staged_f$f.log | awk '{print $1, $6, $7}' | tr '\n' ';'; echo; done
grep -vE "^# (times|buffer|of the|ranks, med|meets|h_first)" $R/first_use_*.log | cut -c1-190
echo "== done ($(el))"
