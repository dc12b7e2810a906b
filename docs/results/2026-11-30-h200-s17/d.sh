#!/bin/bash
# Session 17, call D (2 x H200): the device guard (every call on the communicator's GPU), the two-shot flag: build, CTest unit,
# the Python GPU pytest step, GPU suite on both GPUs (2/4) and on one (2/4/8, MPS), gpu_registration with a backlog of 1.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi -L; git log --oneline -1; git status --short; } > $R/machine.txt 2>&1
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 120 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed|Skipped" $R/ctest_unit.log | head -5)
RUN_GPU_STEPS=pytest timeout 170 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -3 $R/py.log; snap
suite() { # name ranks budget [env...]
  local name=$1 rk=$2 bu=$3; shift 3
  env "$@" GPU_TEST_RANKS="$rk" GPU_TEST_BUDGET_S=$bu timeout $((bu + 15)) bash tests/gpu/run.sh build-gpu $R/$name > $R/$name.log 2>&1
  echo "suite $name rc=$? ($(el))"; tail -1 $R/$name/summary.txt; grep "FAIL\|NOT-RUN\|RETRIED" $R/$name/summary.txt | head -5
  grep -h "ERROR SUMMARY" $R/$name/gpu-tests.log | sort | uniq -c; snap
}
suite suite2 "2 4" 180
suite suite1 "2 4 8" 200 CUDA_VISIBLE_DEVICES=0
# The registrar's backlog at its smallest: 1000 roa registrations, one sent at a time.
env WEFT_TIMEOUT_S=30 WEFT_CUDA_CHUNK_BYTES=0 WEFT_REGISTRATION_BACKLOG=1 timeout 200 build-gpu/weftrun --grace 15 -n 2 -- build-gpu/tests/gpu/gpu_registration > $R/reg_backlog1.log 2>&1; echo "gpu_registration backlog 1 rc=$? ($(el))"; grep -E "^(PASS|FAIL)" $R/reg_backlog1.log | head -4; snap

# Small-message latency with and without the device guard (one cudaGetDevice + cudaSetDevice per
# call): the tree before it (55501aa, scratch/s17/old) built beside, both run alternately twice.
(cmake -S scratch/s17/old -B build-old -DWEFT_CUDA=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake_old.log 2>&1 && cmake --build build-old -j32 --target weft-bench weftrun > $R/build_old.log 2>&1) || echo "old build failed"
for rep in 1 2; do for t in new old; do b=build-gpu; [ $t = old ] && b=build-old
  WEFT_BACKEND=cuda timeout 60 $b/weftrun -n 2 $b/weft-bench -t all -b 8 -e 64K -f 8 -n 200 -w 20 -c 0 --json $R/small_${t}_r$rep.json > $R/small_${t}_r$rep.log 2>&1; echo "small $t r$rep rc=$? ($(el))"
done; done
python3 - $R <<'PY' | tee $R/small_table.txt
import json, sys, glob, statistics as S, collections
R = sys.argv[1]; t = collections.defaultdict(list)
for f in glob.glob(f"{R}/small_*_r*.json"):
    tag = f.split("/small_")[1].split("_r")[0]
    for line in open(f):
        r = json.loads(line); t[(r["coll"], r["size"], r["inplace"], tag)].append(r["time_us"])
print("coll bytes inplace   new_us   old_us  new/old")
for k in sorted({k[:3] for k in t}):
    n, o = t.get(k + ("new",)), t.get(k + ("old",))
    if n and o:
        print(f"{k[0]} {k[1]} {k[2]} {S.median(n):8.2f} {S.median(o):8.2f} {S.median(n)/S.median(o):7.3f}")
PY
snap
echo "== done ($(el))"
