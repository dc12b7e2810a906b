#!/bin/bash
# Session 10, device call A (1 x H200): HEAD d1097ec: build, unit tests, GPU suite 2/4/8 (first
# GPU run of d1097ec's mp_env_bytes and of gpu_graph on the copy engines on the committed path);
# first-use 64K/16M baseline; scratch cold-launch experiment (launch APIs after an idle gap);
# machine probes (CPU, virtualisation, idle states, perf).
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(lscpu; echo; systemd-detect-virt 2>&1; grep -m1 -o hypervisor /proc/cpuinfo; cat /sys/devices/system/cpu/cpuidle/current_driver 2>&1; ls /sys/devices/system/cpu/cpu0/cpuidle/ 2>&1; for d in /sys/devices/system/cpu/cpu0/cpuidle/state*; do echo "$d $(cat $d/name) $(cat $d/latency) $(cat $d/disable)"; done 2>&1; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1; which perf 2>&1; cat /proc/sys/kernel/perf_event_paranoid 2>&1) > $R/machine.txt 2>&1
grep -E "Model name|^CPU\(s\)|Hypervisor|L2|L3" $R/machine.txt; tail -12 $R/machine.txt
nvcc -O2 -arch=sm_90 -std=c++14 scratch/cold_launch.cu -lcuda -o /tmp/cold_launch > $R/cold_build.log 2>&1 || cat $R/cold_build.log
echo "== cold launch, no MPS"; /tmp/cold_launch 21 | tee $R/cold_nomps.txt
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
GPU_TEST_RANKS="2 4 8" GPU_TEST_BUDGET_S=300 timeout 320 bash tests/gpu/run.sh build-gpu $R/suite > $R/suite.log 2>&1; echo "suite rc=$? ($(el))"
grep -v " PASS " $R/suite/summary.txt | tail -4; grep -c " PASS " $R/suite/summary.txt; grep -E "3 blocks|copy engine" $R/suite/summary.txt
grep -h "ERROR SUMMARY" $R/suite/gpu-tests.log | sort | uniq -c
snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
echo "== cold launch, MPS, 1 client"; /tmp/cold_launch 21 | tee $R/cold_mps1.txt
echo "== cold launch, MPS, 4 clients (client 0 shown)"
for i in 1 2 3; do /tmp/cold_launch 21 > $R/cold_mps4_$i.txt & done; /tmp/cold_launch 21 | tee $R/cold_mps4_0.txt; wait
WEFT_BACKEND=cuda timeout 150 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 7 > $R/first_use.log 2>&1; echo "first-use rc=$? ($(el))"
grep -v "^#" $R/first_use.log | head -12
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
