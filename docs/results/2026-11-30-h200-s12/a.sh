#!/bin/bash
# Session 12, device call A (2 x H200): main (cf117d8: push limit 512 KiB for two ranks on two
# GPUs, its first GPU run) and branch a2av-push (002b6a2, extracted to scratch/a2av): both built
# with NCCL; GPU suite on both GPUs (2/4 ranks) for each; the branch's suite on one GPU (2/4/8
# ranks, MPS); all-to-all-v push vs mesh vs NCCL on two GPUs (branch); all-gather, reduce-scatter,
# all-to-all pushed vs mesh at 256 KiB - 1 MiB per pair (main), three repetitions alternated.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
B=scratch/a2av
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake_main.log 2>&1 && cmake --build build-gpu -j16 > $R/build_main.log 2>&1; echo $? > $R/rc_main) &
(cmake -S $B -B $B/build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake_br.log 2>&1 && cmake --build $B/build-gpu -j16 > $R/build_br.log 2>&1; echo $? > $R/rc_br) &
wait
echo "== build main rc=$(cat $R/rc_main) branch rc=$(cat $R/rc_br) ($(el))"
[ "$(cat $R/rc_main)$(cat $R/rc_br)" = 00 ] || { tail -20 $R/build_main.log $R/build_br.log; snap; exit 1; }
suite() { # name build ranks budget [env...]
  local name=$1 bd=$2 rk=$3 bu=$4; shift 4
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh $bd $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep " PASS \| FAIL \| NOT-RUN " $R/$name/summary.txt | grep -v " PASS " | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite main2 build-gpu "2 4" 150
suite br2 $B/build-gpu "2 4" 150
suite br1 $B/build-gpu "2 4 8" 200 CUDA_VISIBLE_DEVICES=0
export WEFT_BACKEND=cuda
for rep in 1 2 3; do
  timeout 30 $B/build-gpu/weftrun -n 2 $B/build-gpu/weft-bench -t all_to_allv -b 4K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/v_push_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL v push $rep"
  WEFT_CUDA_PUSH_BYTES=0 timeout 30 $B/build-gpu/weftrun -n 2 $B/build-gpu/weft-bench -t all_to_allv -b 4K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/v_mesh_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL v mesh $rep"
  timeout 30 $B/build-gpu/weftrun -n 2 $B/build-gpu/weft-bench-nccl -t all_to_allv -b 4K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/v_nccl_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL v nccl $rep"
done; echo "== a2av bench ($(el))"; snap
for rep in 1 2 3; do
  for t in all_gather reduce_scatter all_to_all; do
    WEFT_CUDA_PUSH_BYTES=4M timeout 30 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $t -b 512K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/p_${t}_push_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $t push $rep"
    WEFT_CUDA_PUSH_BYTES=0 timeout 30 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $t -b 512K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/p_${t}_mesh_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL $t mesh $rep"
  done
done; echo "== push vs mesh ($(el))"
snap
echo "== done ($(el))"
