#!/bin/bash
# Session 4, device call A (1 x H200): where does the idle-gap cost of a call come from?
# idle_probe (no weft: CPU loop, empty kernel launch+sync after sleep/spin/busy gaps), alone
# without MPS and 4 processes under MPS; first-use with the three gap kinds and host parts.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 --target first-use weftrun > $R/build.log 2>&1) &
nvcc -O2 -arch=sm_90 -o /tmp/idle_probe scratch/idle_probe.cu > $R/probe_build.log 2>&1 || { cat $R/probe_build.log; }
{
  cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1
  for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do echo "$s $(cat $s/name) lat=$(cat $s/latency)"; done 2>&1
  grep MHz /proc/cpuinfo | head -4
  nvidia-smi -q -d PERFORMANCE,CLOCK | head -60
} > $R/platform.txt 2>&1
echo "== probe alone, no MPS ($(el))"
/tmp/idle_probe 10 30 | tee $R/probe_alone.txt
wait
echo "== build done ($(el))"; tail -3 $R/build.log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
echo "== probe alone under MPS ($(el))"
/tmp/idle_probe 10 30 | tee $R/probe_mps1.txt
echo "== probe x4 under MPS ($(el))"
for i in 0 1 2 3; do /tmp/idle_probe 10 30 > $R/probe_mps4_$i.txt & done; wait
grep kernel $R/probe_mps4_*.txt
snap
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,utilization.gpu --format=csv -lms 50 > $R/smi.csv 2>&1 &
SMI=$!
W="build-gpu/weftrun -n 4 --grace 5"
export WEFT_BACKEND=cuda WEFT_TIMEOUT_S=60
for kind in sleep spin busy; do
  timeout 100 $W build-gpu/first-use -m roa -s 64K,16M -g 10,100 -r 7 --gap-kind $kind --json $R/first_use_$kind.json > $R/first_use_$kind.log 2>&1; echo "first-use $kind rc=$? ($(el))"
done
WEFT_WAIT_SPIN_NS=200000000 timeout 100 $W build-gpu/first-use -m roa -s 64K -g 10 -r 7 --gap-kind sleep --tag spinwait > $R/first_use_spinwait.log 2>&1; echo "first-use spinwait rc=$? ($(el))"
kill $SMI
grep -vE "^# (times|buffer|of the|ranks, med|meets|h_first)" $R/first_use_*.log | cut -c1-190
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
