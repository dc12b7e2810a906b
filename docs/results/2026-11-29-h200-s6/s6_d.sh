#!/bin/bash
# Session 6, device call D (2 x H200 over NVLink): the store forms at HEAD (all-gather and
# two-shot all-reduce). GPU unit tests; the suite at 2, 4 and 8 ranks (one, two and four ranks
# per GPU); two-shot all-reduce, stores (default) against WEFT_REMOTE_STORES=0, with 4 ranks on
# one GPU and 4 ranks on two GPUs; all-gather's default path on two GPUs (one rank per GPU).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/machine.txt 2>&1
git log --oneline -1 > $R/commit.txt 2>&1; git status --short > $R/status.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 120 ctest -j8 -L unit > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; tail -2 $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=260 timeout 275 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
grep -h "FAIL" $R/suite/gpu-tests.log | head -5
snap
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for rep in 1 2; do
  for st in auto 0; do
    CUDA_VISIBLE_DEVICES=0 WEFT_REMOTE_STORES=$st timeout 60 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_reduce -b 2M -e 128M -f 4 -n 20 -w 5 > $R/ar1_${st}_$rep.log 2>&1 || echo "ar1 $st rc=$?"
    WEFT_REMOTE_STORES=$st timeout 60 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_reduce -b 2M -e 128M -f 4 -n 20 -w 5 > $R/ar2_${st}_$rep.log 2>&1 || echo "ar2 $st rc=$?"
  done
done
echo quit | nvidia-cuda-mps-control
timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_gather -b 64M -e 1G -f 4 -n 20 -w 5 > $R/ag2.log 2>&1 || echo "ag2 rc=$?"
echo "== bench ($(el))"
for g in 1 2; do for rep in 1 2; do
  echo "# all_reduce, 4 ranks on $g GPU(s), rep $rep: size | out of place: stores loads | in place: stores loads | wrong"
  paste <(grep -vE '^#' $R/ar${g}_auto_$rep.log | awk 'NF>8{print $1, $6, $10, $9+$13}') <(grep -vE '^#' $R/ar${g}_0_$rep.log | awk 'NF>8{print $6, $10, $9+$13}') | awk '{printf "%10d | %8.1f %8.1f | %8.1f %8.1f | %d\n", $1, $2, $5, $3, $6, $4+$7}'
done; done
echo "# all_gather 2 GPUs default: size oop inplace wrong"; grep -vE '^#' $R/ag2.log | awk 'NF>8{print $1, $6, $10, $9+$13}'
snap
echo "== done ($(el))"
