#!/bin/bash
# Session 18, call C (2 x H200): why all_reduce MAX runs 30% below SUM at 256 MiB on two GPUs:
# weft_dev_reduce and weft_dev_reduce_typed, SUM against MAX, local and peer sources; SASS.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
nvcc -O3 -DNDEBUG -Iinclude -Isrc -arch=sm_90 -std=c++17 -Xptxas -v -o /tmp/redbench scratch/s18/redbench.cu > $R/ptxas.txt 2>&1 || { cat $R/ptxas.txt; exit 1; }
/tmp/redbench | tee $R/redbench.txt
# ktyped<7, Op>: WEFT_BFLOAT16 is 7
cuobjdump -sass -fun '_Z6ktypedILi7ELi2EEvPvPKvS2_m' /tmp/redbench > $R/sass_typed_bf16_max.txt 2>&1
cuobjdump -sass -fun '_Z6ktypedILi7ELi0EEvPvPKvS2_m' /tmp/redbench > $R/sass_typed_bf16_sum.txt 2>&1
wc -l $R/sass_*.txt
tar czf $OUT/results.tgz -C /tmp res
