#!/bin/bash
# Session 22, call A (2 x H200): f2aab9c (no store form on the copy engines) against 070737f.
# Build both (the old tree with the new tests/gpu); gpu_late all_gather with the copies on the
# engines, 2 ranks (one per GPU), old and new: the late rank's output must stay untouched (the
# old library's store form writes into it after the others' entry kernels gave up); weft-bench
# all-gather and all-to-all 16 MiB - 1 GiB, 2 ranks on 2 GPUs, old and new alternated (auto: the
# engines from 64 MiB; old: store form there, new: loads), and new with WEFT_CUDA_COPY_ENGINE=0.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi -L > $R/machine.txt 2>&1
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf scratch/s22/old.tgz -C /tmp/old && cp tests/gpu/*.c tests/gpu/*.h /tmp/old/tests/gpu/ &&
(cmake -S /tmp/old -B /tmp/old/b -DWEFT_CUDA=ON > $R/cmake_old.log 2>&1 && cmake --build /tmp/old/b -j32 --target weftrun gpu_late weft-bench > $R/build_old.log 2>&1) || { echo "old build failed"; tail -20 $R/build_old.log; }
echo "== old build ($(el))"
for tb in old:/tmp/old/b new:build-gpu; do
  tag=${tb%%:*}; b=${tb#*:}
  WEFT_TIMEOUT_S=3 WEFT_CUDA_COPY_ENGINE=1 timeout 90 $b/weftrun --grace 15 -n 2 -- $b/tests/gpu/gpu_late all_gather > $R/late_$tag.log 2>&1
  echo "gpu_late all_gather (engines) $tag rc=$?: $(grep -hE '^(PASS|FAIL)' $R/late_$tag.log | cut -c1-200 | sort | uniq -c | tr '\n' ' ')"
  grep -h "late rank's output" $R/late_$tag.log | head -2
done
snap
bench() { local tag=$1 b=$2; shift 2; env "$@" timeout 150 $b/weftrun -n 2 $b/weft-bench -t all_gather -t all_to_all -b 16M -e 1G -f 4 -n 20 -w 5 > $R/bench_$tag.log 2>&1
  echo "$tag rc=$?: $(grep -E '^ +[0-9]+ ' $R/bench_$tag.log | awk '{printf "%s:%s/%s(w%s,%s) ", $1/1048576, $6, $11, $9, $14}')"; }
for i in 1 2; do
  bench old_$i /tmp/old/b X=1
  bench new_$i build-gpu X=1
done
bench new_sm build-gpu WEFT_CUDA_COPY_ENGINE=0
bench new_stores_off build-gpu WEFT_REMOTE_STORES=0 WEFT_CUDA_COPY_ENGINE=0
snap; echo "== done ($(el))"
