"""Host phases of weft-bench's timed all-reduces from trace.patch files, per size in the order
weft-bench ran them (ITERS timed calls each): python3 bench_phases.py DIR NRANKS ITERS"""
import sys, statistics as S
d, n, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
R = []
for r in range(n):
    recs = {}
    for line in open(f'{d}/trace_r{r}.txt'):
        v = list(map(int, line.split()))
        recs[v[0]] = (v[1], v[2:])
    R.append(recs)
seqs = sorted(set.intersection(*[set(x) for x in R]))
timed = []
for s in seqs:
    prev = s - 1
    if R[0][s][0] == 4 and prev in R[0] and R[0][prev][0] == 1:  # timed calls follow a barrier
        timed.append(s)
names = ('pre', 'post', 'wait', 'check+part', 'launch', 'host total', 't0 skew')
for i in range(0, len(timed), iters):
    ph = {k: [] for k in names}
    for s in timed[i:i + iters]:
        for r in range(n):
            t = R[r][s][1]
            ph['pre'].append(t[1] - t[0]); ph['post'].append(t[2] - t[1]); ph['wait'].append(t[3] - t[2])
            ph['check+part'].append(t[5] - t[3]); ph['launch'].append(t[6] - t[5]); ph['host total'].append(t[7] - t[0])
        t0s = [R[r][s][1][0] for r in range(n)]
        ph['t0 skew'].append(max(t0s) - min(t0s))
    print(f'size #{i // iters}: {len(ph["t0 skew"])} timed all-reduces; median (p90) us: ' +
          ', '.join(f'{k} {S.median(v) / 1e3:.2f} ({sorted(v)[int(0.9 * len(v))] / 1e3:.2f})' for k, v in ph.items()))
