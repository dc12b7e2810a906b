#!/bin/bash
# Session 14, call 3: (a) the copy-engine rule without the own-destination exception (all-gather
# out of place takes the engines by size): checked 64-256 MiB, then timed 16 MiB - 1 GiB against
# the engines off / on; (b) in-place all-reduce, 2 ranks (two-shot store form): stores on/off and
# unit 1M/4M at 256 MiB and 1 GiB, against out of place (one-shot).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
B() { timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench "$@" > /dev/null 2>> $R/err.log || echo "FAIL $* rc $?"; }
for ce in auto 1; do
  WEFT_CUDA_COPY_ENGINE=$ce B -t all_gather -b 64M -e 256M -f 4 -n 2 -w 1 -c 1 && echo "check ag ce $ce ok ($(el))"
done
for rep in 1 2; do
  for ce in 0 1 auto; do
    WEFT_CUDA_COPY_ENGINE=$ce B -t all_gather -b 16M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/g_ce${ce}_r$rep.json
  done
done
echo "ag done ($(el))"; snap
for rep in 1 2 3; do
  B -t all_reduce -b 256M -e 1G -f 4 -n 10 -w 3 -c 0 --json $R/a_base_r$rep.json
  WEFT_REMOTE_STORES=0 B -t all_reduce -b 256M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 1 --json $R/a_nostore_r$rep.json
  WEFT_CUDA_UNIT_BYTES=4M B -t all_reduce -b 256M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 1 --json $R/a_unit4m_r$rep.json
  WEFT_CUDA_UNIT_BYTES=256K B -t all_reduce -b 256M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 1 --json $R/a_unit256k_r$rep.json
done
echo "ar done ($(el))"; snap
python3 scratch/s14/tab.py $R g ce0 ce1 ceauto | tee $R/table_g.txt
python3 scratch/s14/tab.py $R a base nostore unit4m unit256k | tee $R/table_a.txt; snap
echo "== done ($(el))"
