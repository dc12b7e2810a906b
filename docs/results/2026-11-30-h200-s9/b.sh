#!/bin/bash
# Session 9, device call B (1 x H200, 4 ranks under MPS): HEAD (weft-bench honours WEFT_BACKEND):
# unit tests incl. bench_run on a GPU host; the push path's fence A/B (HEAD vs HEAD without the
# __threadfence after the LL stores) with weft-bench all-reduce / all-gather 8 B - 64 KiB,
# alternated 3x; first-use roa,jit 64K,16M gaps 10,100 sleep|busy r 7.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/res; rm -rf $R; mkdir -p $OUT $R
export NCCL_NVLS_ENABLE=0
snap() { tar czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
git log --oneline -1 > $R/commit.txt 2>&1
rm -rf /tmp/nf && mkdir /tmp/nf && git archive HEAD | tar x -C /tmp/nf
python3 - <<'PY'
p='/tmp/nf/src/exec/exec_cuda.cu'; s=open(p).read()
old="        __threadfence();\n        for (int i = 1; i < n && st == 0; i++) {"
assert s.count(old)==1
open(p,'w').write(s.replace(old,"        for (int i = 1; i < n && st == 0; i++) {"))
PY
(cmake -S . -B build-gpu -DWEFT_CUDA=ON -DWEFT_WERROR=ON > $R/cmake.log 2>&1 && cmake --build build-gpu -j16 > $R/build.log 2>&1) || { tail -30 $R/build.log; snap; exit 1; }
(cmake -S /tmp/nf -B /tmp/nf/b -DWEFT_CUDA=ON > $R/cmake_nf.log 2>&1 && cmake --build /tmp/nf/b -j16 --target weft-bench weftrun > $R/build_nf.log 2>&1) || { tail -30 $R/build_nf.log; snap; exit 1; }
echo "== builds ok ($(el))"
(cd build-gpu && timeout 200 ctest -j8 -L unit --output-on-failure > $R/ctest_unit.log 2>&1; echo "ctest unit rc=$?"; grep -E "tests passed|Failed" $R/ctest_unit.log)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
for rep in 1 2 3; do
  for v in fence nofence; do
    b=build-gpu; [ $v = nofence ] && b=/tmp/nf/b
    for coll in all_reduce all_gather; do
      WEFT_BACKEND=cuda timeout 60 $b/weftrun -n 4 $b/weft-bench -t $coll -b 8 -e 64K -f 8 -n 300 -w 30 --inplace 1 > $R/ab_${v}_${coll}_$rep.log 2>&1 || echo "ab $v $coll $rep rc=$?"
    done
  done
done
echo "== A/B done ($(el))"
python3 - $R <<'PY'
import sys,glob,re,statistics as st
R=sys.argv[1]; t={}
for f in glob.glob(R+'/ab_*.log'):
    v,coll=re.match(r'.*/ab_(\w+?)_(all_\w+)_\d\.log',f).groups()
    for l in open(f):
        x=l.split()
        if len(x)>8 and x[0].isdigit():
            t.setdefault((coll,int(x[0])),{}).setdefault(v,[]).append(float(x[5]))
print("%-11s %8s %22s %22s %7s"%("coll","bytes","fence (3 runs)","nofence (3 runs)","diff"))
for k in sorted(t):
    a=t[k].get('fence',[]); b=t[k].get('nofence',[])
    if a and b: print("%-11s %8d %22s %22s %+7.2f"%(k[0],k[1]," ".join("%.2f"%x for x in a)," ".join("%.2f"%x for x in b),st.median(a)-st.median(b)))
PY
snap
for kind in sleep busy; do
  WEFT_BACKEND=cuda timeout 150 build-gpu/weftrun -n 4 --grace 5 build-gpu/first-use -m roa,jit -s 64K,16M -g 10,100 -r 7 --gap-kind $kind --json $R/first_use_$kind.json > $R/first_use_$kind.log 2>&1; echo "first-use $kind rc=$? ($(el))"
  grep -E "^ *(roa|jit) " $R/first_use_$kind.log | cut -c1-150
done
echo quit | nvidia-cuda-mps-control
snap
echo "== done ($(el))"
