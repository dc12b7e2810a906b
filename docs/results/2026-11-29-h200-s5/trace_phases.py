"""Host phases of first-use's all-reduces from trace.patch's per-rank files (section 1 of
../2026-11-29-h200-s5.md). Usage: tar xzf a_trace/traces.tgz -C DIR &&
python3 trace_phases.py DIR sleep busy spin   (call B: b_plan_cache/traces.tgz, kinds e0 e8)."""
import sys, statistics as S
def load(kind):
    R=[]
    for r in range(4):
        recs=[]
        for line in open(f'{sys.argv[1]}/trace_{kind}/trace_r{r}.txt'):
            v=list(map(int,line.split()))
            recs.append((v[0],v[1],v[2:]))
        R.append(recs)
    return R
names=['pre','post','wait','check+part','launch','end','ret->','sync']
def phases(t):
    # t0 start t1 exch t2 posted t3 waited t4 check t5 prelaunch t6 launched t7 end t8 synced t9 returned
    return [t[1]-t[0], t[2]-t[1], t[3]-t[2], t[5]-t[3], t[6]-t[5], t[7]-t[6], t[9]-t[7], t[8]-t[9]]
for kind in sys.argv[2:]:
    R=load(kind)
    n=len(R[0])
    groups={'gap':[], 'steady':[]}
    skew={'gap':[], 'steady':[]}; bskew={'gap':[],'steady':[]}; arr={'gap':[],'steady':[]}
    for i in range(2,n):
        if R[0][i][1]!=4: continue
        # previous record is barrier; gap if the barrier started >5ms after the op before it ended
        b=[R[r][i-1][2] for r in range(4)]; pb=[R[r][i-2][2] for r in range(4)]
        g = 'gap' if b[0][0]-pb[0][8] > 5e6 else 'steady'
        for r in range(4):
            groups[g].append(phases(R[r][i][2]))
        t0s=[R[r][i][2][0] for r in range(4)]
        t2s=[R[r][i][2][2] for r in range(4)]
        skew[g].append((max(t0s)-min(t0s))/1e3)
        arr[g].append((max(R[r][i][2][8] for r in range(4))-min(t0s))/1e3)
    print(f'== {kind}: medians over ranks and calls, us  (n gap={len(groups["gap"])}, steady={len(groups["steady"])})')
    print('%-8s'%'', ' '.join('%10s'%x for x in names), '%10s %10s'%('t0 skew','call(max)'))
    for g in ['steady','gap']:
        cols=list(zip(*groups[g]))
        print('%-8s'%g, ' '.join('%10.2f'%(S.median(c)/1e3) for c in cols), '%10.2f %10.2f'%(S.median(skew[g]),S.median(arr[g])))
    # per-rank gap breakdown, max phase
    cols=list(zip(*groups['gap']))
    print('%-8s'%'gap p90', ' '.join('%10.2f'%(sorted(c)[int(0.9*len(c))]/1e3) for c in cols))
