#!/bin/bash
# Session 12, device call B (2 x H200): main with all_to_allv on the push path (1c0e8b3): build
# with NCCL, unit tests, the Python GPU steps (pytest, example, pip), the `make run` job on the
# CUDA backend (2 ranks, one per GPU), every collective weft vs NCCL 4 KiB - 2 MiB (two
# repetitions alternated), and on one GPU with 4 ranks (MPS) all_to_allv pushed vs the mesh.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
NR=$(bash bench/nccl_root.sh)
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON -DWEFT_NCCL_ROOT=$NR > $R/cmake.log 2>&1 && cmake --build build-gpu -j32 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
echo "== build ok ($(el))"
(cd build-gpu && timeout 200 ctest -j16 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
timeout 250 bash python/tests/run_gpu.sh build-gpu $R/py > $R/py.log 2>&1; echo "python rc=$? ($(el))"; tail -5 $R/py.log
snap
timeout 120 bash bench/run.sh build-gpu 2 > $R/make_run.log 2>&1; echo "make run job rc=$? ($(el))"; tail -2 $R/make_run.log
snap
export WEFT_BACKEND=cuda
for rep in 1 2; do
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t all -b 4K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/w_weft_r$rep.json > $R/w_weft_r$rep.log 2>&1 || echo "FAIL weft rep $rep"
  timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench-nccl -t all -b 4K -e 2M -f 2 -n 40 -w 5 -c 1 --json $R/w_nccl_r$rep.json > $R/w_nccl_r$rep.log 2>&1 || echo "FAIL nccl rep $rep"
done; echo "== weft vs nccl ($(el))"
snap
export CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p /tmp/mps-pipe /tmp/mps-log
nvidia-cuda-mps-control -d
for rep in 1 2 3; do
  timeout 30 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_to_allv -b 1K -e 256K -f 4 -n 40 -w 5 -c 1 --json $R/v4_push_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL push $rep"
  WEFT_CUDA_PUSH_BYTES=0 timeout 30 build-gpu/weftrun -n 4 build-gpu/weft-bench -t all_to_allv -b 1K -e 256K -f 4 -n 40 -w 5 -c 1 --json $R/v4_mesh_r$rep.json > /dev/null 2>> $R/err.log || echo "FAIL mesh $rep"
done; echo "== a2av 4 ranks one GPU ($(el))"
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
