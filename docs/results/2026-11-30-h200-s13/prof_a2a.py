"""Timeline of weft's all-to-all of 1 GiB on two GPUs (torch.profiler / CUPTI): which kernels and
copies run on which stream, and when. Run: WEFT_LIBRARY=... weftrun -n 2 python prof_a2a.py OUTDIR TAG"""
import json, os, sys
import torch
from torch.profiler import profile, ProfilerActivity
import weft, weft.torch as wt

out, tag = sys.argv[1], sys.argv[2]
comm = weft.init(backend="cuda")
torch.cuda.set_device(comm.device)
pool = wt.mem_pool(comm)
n = 1 << 28  # floats: 1 GiB per buffer
with torch.cuda.use_mem_pool(pool):
    x = torch.full((n,), float(comm.rank + 1), device="cuda")
    y = torch.empty_like(x)
for _ in range(3):
    comm.all_to_all_single(y, x)
torch.cuda.synchronize()
comm.barrier(); torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        comm.all_to_all_single(y, x)
    torch.cuda.synchronize()
half = n // 2
assert torch.all(y[:half] == 1).item() and torch.all(y[half:] == 2).item(), "wrong result"
st = comm.stats()
prof.export_chrome_trace(f"{out}/trace_{tag}_r{comm.rank}.json")
ev = [e for e in json.load(open(f"{out}/trace_{tag}_r{comm.rank}.json"))["traceEvents"]
      if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
ev.sort(key=lambda e: e["ts"])
t0 = ev[0]["ts"] if ev else 0
if comm.rank == 0:
    print(f"[{tag}] rank 0 stats: {st}")
    for e in ev:
        print(f"[{tag}] {e['ts'] - t0:10.1f} +{e['dur']:8.1f} us stream {e['args'].get('stream')} "
              f"{e['cat']} {e['name'][:60]}")
comm.barrier(); torch.cuda.synchronize()
del x, y
comm.destroy()
