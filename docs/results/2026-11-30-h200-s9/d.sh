#!/bin/bash
# Session 9, device call D (2 x H200, one rank per GPU; 4 ranks = 2 per GPU under MPS): HEAD:
# unit tests, GPU suite 2/4 (3-block run, the WEFT_CUDA_MAX_BLOCKS bound on two GPUs), weft-bench
# all-gather up to 1 GiB with WEFT_CUDA_COPY_ENGINE=auto (blocks column: 0 where auto takes the
# engines), and smoke runs of the programs that now open their communicator with
# gpu_prog_comm_open (first-use, moe-bench, launch-cost, weft-calibrate).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi topo -m > $R/topo.txt 2>&1; head -3 $R/topo.txt
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4" GPU_TEST_BUDGET_S=240 timeout 255 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt; grep "3 blocks" $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
W=build-gpu/weftrun; export WEFT_BACKEND=cuda
timeout 90 $W -n 2 build-gpu/weft-bench -t all_gather -b 1M -e 1G -f 8 -n 10 -w 2 > $R/wb_ag_auto.log 2>&1; echo "weft-bench all_gather auto rc=$?"
grep -E "^ +[0-9]" $R/wb_ag_auto.log | cut -c1-150; grep "copy-engine operations" $R/wb_ag_auto.log
timeout 60 $W -n 2 --grace 5 build-gpu/first-use -m roa,jit -s 64K,256M -g 10 -r 2 > $R/first_use.log 2>&1; echo "first-use rc=$?"
grep -E "^ *(roa|jit) " $R/first_use.log | cut -c1-150
timeout 60 $W -n 2 build-gpu/moe-bench -T 512 -H 1024 -E 16 -n 5 -w 2 > $R/moe.log 2>&1; echo "moe-bench rc=$?"; grep -v "^#" $R/moe.log | head -6
timeout 90 $W -n 2 build-gpu/launch-cost -k 2000 -b 100 > $R/launch_cost.log 2>&1; echo "launch-cost rc=$?"; grep -v "^#" $R/launch_cost.log | head -6
timeout 90 $W -n 2 build-gpu/weft-calibrate -r 1 -V 4M > $R/calibrate.log 2>&1; echo "weft-calibrate rc=$?"; grep -E "drain_gbps" $R/calibrate.log
snap
echo "== done ($(el))"
