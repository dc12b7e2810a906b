#!/bin/bash
# Session 14, call 2 (call 1 = n.sh: suites passed, benchmarks with -c 1 at 1 GiB ran past 600 s).
# Every collective 16 MiB - 1 GiB, engines off / on / auto and NCCL, unchecked (-c 0; the suites
# check), two repetitions alternated.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
if [ ! -x build-gpu/weft-bench-nccl ]; then
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
fi
echo "== build ok ($(el))"
export WEFT_BACKEND=cuda
for rep in 1 2; do
  for ce in 0 1 auto nccl; do
    p=weft-bench; [ $ce = nccl ] && p=weft-bench-nccl
    WEFT_CUDA_COPY_ENGINE=$ce timeout 90 build-gpu/weftrun -n 2 build-gpu/$p -t all -b 16M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/s_ce${ce}_r$rep.json > $R/s_ce${ce}_r$rep.log 2>&1 || echo "FAIL $ce rep $rep rc $?"
    echo "$ce rep $rep ($(el))"; snap
  done
done
python3 scratch/s14/tab.py $R s ce0 ce1 ceauto cenccl | tee $R/table.txt; snap
echo "== done ($(el))"
