#!/bin/bash
# Session 12, call G: side streams on/off (temporary WEFT_X_NOSIDE), copy engines forced on.
export NCCL_NVLS_ENABLE=0 WEFT_BACKEND=cuda WEFT_CUDA_COPY_ENGINE=1
cmake --build build-gpu -j32 --target weftrun weft-bench > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
for rep in 1 2; do for ns in "" 1; do for t in all_to_all all_gather; do
  echo "rep=$rep noside=${ns:-0} $t: $(env ${ns:+WEFT_X_NOSIDE=1} timeout 60 build-gpu/weftrun -n 2 build-gpu/weft-bench -t $t -b 256M -e 1G -f 4 -n 10 -w 3 -c 0 --inplace 0 | grep -E '^ +[0-9]' | awk '{printf "%s:%s ", $1, $6}')"
done; done; done
