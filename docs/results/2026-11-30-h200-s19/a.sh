#!/bin/bash
# Session 19, call A (2 x H200): HEAD f4e254a (never GPU-run: the MoE layout check on CUDA, the
# late-input case in a whole suite at 8 ranks): build, CTest unit, GPU suite on both GPUs (2/4)
# and on one (2/4/8 under MPS, memcheck). Then the MAX/SUM gap on two GPUs: HEAD against HEAD
# with the unconditional loads of s18's d/unconditional_loads.diff, interleaved, and the SASS
# of the collective kernel of both builds.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
rm -rf /tmp/var && mkdir -p /tmp/var && git ls-files -z | xargs -0 cp --parents -t /tmp/var
(cd /tmp/var && patch -p1 -s) < docs/results/2026-11-30-h200-s19/unconditional_loads.diff || echo "patch failed"
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; } &
(cmake -S /tmp/var -B /tmp/var/b -DWEFT_CUDA=ON > $R/cmake_var.log 2>&1 && cmake --build /tmp/var/b -j16 --target weft-bench weftrun > $R/build_var.log 2>&1) || { echo "variant build failed"; tail -20 $R/build_var.log; } &
wait
[ -x build-gpu/weft-bench ] || { echo "no build"; snap; exit 1; }
echo "== builds ok ($(el))"
for b in build-gpu /tmp/var/b; do n=$(basename $(dirname $b))_$(basename $b)
  cuobjdump -sass -fun weft_cuda_collective $b/libweft.so > $R/sass_$n.txt 2>&1 || cuobjdump -sass $b/libweft.so > $R/sass_$n.txt 2>&1
  echo "sass $n: $(wc -l < $R/sass_$n.txt) lines, $(grep -c LDG $R/sass_$n.txt) LDG"
done
(cd build-gpu && timeout 120 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log | head -5)
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 150
suite suite1 "2 4 8" 220 CUDA_VISIBLE_DEVICES=0
for rep in 1 2; do for b in build-gpu /tmp/var/b; do n=$(basename $(dirname $b))_$(basename $b)
 for dt in float bfloat16; do for op in sum max; do
  timeout 40 $b/weftrun -n 2 -- $b/weft-bench --backend cuda -t all_reduce -o $op -d $dt -b 32M -e 256M -f 8 -n 20 --inplace 0 > $R/ar_${n}_${op}_${dt}_$rep.log 2>&1
  echo "$n $op $dt rep$rep rc=$?"; grep -E "^ *[0-9]" $R/ar_${n}_${op}_${dt}_$rep.log | tail -2
 done; done; done; done; snap
echo "== done ($(el))"
