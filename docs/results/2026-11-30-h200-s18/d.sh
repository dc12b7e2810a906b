#!/bin/bash
# Session 18, call D: weft_dev_reduce(_typed) SUM/MAX throughput with the head header (loads
# predicated per unit) and the new one (every unit loads; dead units reread unit 0), twice each.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
mkdir -p /tmp/inc_head/exec && cp scratch/s18/reduce_cuda_head.cuh /tmp/inc_head/exec/reduce_cuda.cuh
nvcc -O3 -DNDEBUG -I/tmp/inc_head -Iinclude -Isrc -arch=sm_90 -std=c++17 -o /tmp/rb_head scratch/s18/redbench.cu &
nvcc -O3 -DNDEBUG -Iinclude -Isrc -arch=sm_90 -std=c++17 -o /tmp/rb_new scratch/s18/redbench.cu & wait
for rep in 1 2; do for v in head new; do /tmp/rb_$v > $R/rb_${v}_$rep.txt 2>&1; done; done
paste $R/rb_head_1.txt $R/rb_new_1.txt | tail -n +2 | awk 'NR==1{print "src1 code dtype op grid | head1 head2 | new1 new2"; next} {print}' > /dev/null
python3 - $R <<'PY'
import sys, os
R = sys.argv[1]
def load(name):
    rows = {}
    for line in open(os.path.join(R, name)):
        f = line.split()
        if len(f) == 6 and f[5].replace('.', '').isdigit():
            rows[tuple(f[:5])] = float(f[5])
    return rows
h1, h2, n1, n2 = (load(f"rb_{v}_{r}.txt") for v in ("head", "new") for r in (1, 2))
print(f"{'src1':6} {'code':7} {'dtype':5} {'op':4} {'grid':>4} {'head GB/s':>17} {'new GB/s':>17}")
for k in h1:
    print(f"{k[0]:6} {k[1]:7} {k[2]:5} {k[3]:4} {k[4]:>4} {h1[k]:8.1f} {h2.get(k,0):8.1f} {n1.get(k,0):8.1f} {n2.get(k,0):8.1f}")
PY
head -1 $R/rb_new_1.txt
tar czf $OUT/results.tgz -C /tmp res
