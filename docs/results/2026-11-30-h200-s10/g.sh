#!/bin/bash
# Session 10, device call G (2 x H200): 8906199 with NCCL benches: the Python GPU tests (pytest,
# example) across two GPUs; all-reduce weft (new defaults) vs NCCL 128K-16M, 2 ranks, alternated
# twice; first-use-nccl roa vs nccl with the launch control, 64K/16M, gaps 10/100 ms.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
for rep in 1 2; do for lib in weft nccl; do
  b=build-gpu/weft-bench; [ $lib = nccl ] && b=build-gpu/weft-bench-nccl
  WEFT_BACKEND=cuda timeout 100 build-gpu/weftrun -n 2 $b -t all_reduce -b 128K -e 16M -f 2 -n 40 -w 5 --json $R/ar_${lib}_r$rep.json > $R/ar_${lib}_r$rep.log 2>&1 || echo "FAIL $lib rep $rep"
done; done; echo "== weft vs nccl ($(el))"
WEFT_BACKEND=cuda timeout 120 build-gpu/weftrun -n 2 --grace 5 build-gpu/first-use-nccl -m roa,nccl -s 64K,16M -g 10,100 -r 7 --json $R/first_use_nccl.json > $R/first_use_nccl.log 2>&1; echo "first-use-nccl rc=$? ($(el))"
grep -v "^#" $R/first_use_nccl.log
snap
RUN_GPU_STEPS="pytest example" timeout 280 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -6 $R/py.log
snap
echo "== done ($(el))"
