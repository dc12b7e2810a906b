#!/bin/bash
# Session 8, device call H (2 x H200): which fence after the push path's LL stores removes the
# ~1 ms after an idle gap, at what steady cost? WEFT_EXP (not committed): 2 = every thread
# __threadfence_system, 4 = one per warp, 8 = one per block, 16 = every thread __threadfence.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git diff > $R/exp.diff
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda
for exp in 0 2 4 8 16; do
  WEFT_EXP=$exp timeout 40 build-gpu/weftrun -n 2 --grace 5 build-gpu/first-use-nccl -m roa -s 64K -g 10,100 -r 7 > $R/h_fu_exp$exp.log 2>&1 || echo "FAIL fu exp $exp"
  awk -v t="exp=$exp" '$1=="roa"{printf "%-7s %7s %4s first %7.1f steady %6.1f after %7.1f f/s %6s\n", t,$2,$3,$4,$5,$6,$7}' $R/h_fu_exp$exp.log
done
for exp in 0 2 4 8 16; do
  WEFT_EXP=$exp timeout 40 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all_reduce -b 8 -e 1M -f 8 -n 300 -w 30 --inplace 0 --json $R/h_wb_exp$exp.json > $R/h_wb_exp$exp.log 2>&1 || echo "FAIL wb exp $exp"
done
python3 - $R <<'PY'
import json, sys, collections
t = collections.defaultdict(dict)
for e in (0, 2, 4, 8, 16):
    for l in open(f"{sys.argv[1]}/h_wb_exp{e}.json"):
        r = json.loads(l); t[(r["coll"], r["size"])][e] = (r["time_us"], r["wrong"])
print("coll size: exp0 exp2 exp4 exp8 exp16 (us, wrong)")
for k in sorted(t): print(k[0], k[1], " ".join(f"{t[k][e][0]:.1f}/{t[k][e][1]}" for e in (0,2,4,8,16) if e in t[k]))
PY
for exp in 4 8; do
  WEFT_EXP=$exp GPU_TEST_QUICK=0 timeout 60 build-gpu/weftrun -n 2 build-gpu/tests/gpu/gpu_collectives > $R/h_coll_exp$exp.log 2>&1; echo "gpu_collectives exp $exp rc=$?"
  WEFT_EXP=$exp timeout 60 build-gpu/weftrun -n 2 build-gpu/tests/gpu/gpu_graph > $R/h_graph_exp$exp.log 2>&1; echo "gpu_graph exp $exp rc=$?"
done
snap
echo "== done ($(el))"
