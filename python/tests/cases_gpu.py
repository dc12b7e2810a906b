"""GPU-only cases of worker.py (imported by it for the torch-cuda kinds): CUDA-graph capture
and replay, the current stream, first use of tensors allocated at least 10 ms before, the
process-wide allocator, a pool outliving its communicator, and CUDA tensors refused by a
host-backend communicator."""

import gc
import time

import numpy as np

import weft

from worker import PAST_PUSH_COUNT, case, gen_values

CUDA_KINDS = ("torch-cuda", "torch-cuda-pool", "torch-cuda-global")
REPLAYS = 20


@case("graph_capture", kinds=("torch-cuda", "torch-cuda-pool"))
def case_graph_capture(ctx, _):
    """All-reduce and all-gather captured in one CUDA graph and replayed back to back, with new
    inputs before each replay; then an eager call after the replays. (PyTorch cannot capture
    graphs under a process-wide CUDAPluggableAllocator, so torch-cuda-global is left out.)"""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    torch = k.torch
    count = 4099
    src = k.empty((count,), "float32")
    ar = k.empty((count,), "float32")
    ag = k.empty((count * n,), "float32")
    hist_ar = k.empty((REPLAYS, count), "float32")
    hist_ag = k.empty((REPLAYS, count * n), "float32")

    def body():
        ar.copy_(src)
        comm.all_reduce(ar)
        comm.all_gather_into_tensor(ag, src)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as PyTorch advises before a capture
        src.fill_(1.0)
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    ctx.expect_values(ar, np.full(count, float(n)), "eager warm-up all_reduce")

    graph = torch.cuda.CUDAGraph()
    # weft makes host calls while a collective is captured: relaxed mode, as tests/gpu does.
    with torch.cuda.graph(graph, capture_error_mode="relaxed"):
        body()
    for i in range(REPLAYS):
        src.fill_(float((i + 1) * (me + 1)))
        graph.replay()
        hist_ar[i].copy_(ar)
        hist_ag[i].copy_(ag)
    torch.cuda.synchronize()
    for i in range(REPLAYS):
        ctx.expect_values(hist_ar[i], np.full(count, float((i + 1) * n * (n + 1) // 2)),
                          f"replay {i}: all_reduce")
        want = np.concatenate([np.full(count, float((i + 1) * (r + 1))) for r in range(n)])
        ctx.expect_values(hist_ag[i], want, f"replay {i}: all_gather")
    src.fill_(2.0)
    comm.all_reduce(src)
    torch.cuda.synchronize()
    ctx.expect_values(src, np.full(count, 2.0 * n), "eager all_reduce after the replays")


@case("current_stream", kinds=CUDA_KINDS)
def case_current_stream(ctx, _):
    """Collectives run on torch's current stream: work queued before them on a side stream is
    seen, and work queued after them sees their result."""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    torch = k.torch
    count = 1 << 20
    t = k.empty((count,), "float32")
    out = k.empty((count,), "float32")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # a few kernels in front of the collective
            t.fill_(float(me + 1))
        comm.all_reduce(t)
        out.copy_(t)
    side.synchronize()
    ctx.expect_values(out, np.full(count, float(n * (n + 1) // 2)), "all_reduce on a side stream")


@case("first_use", kinds=("torch-cuda-pool", "torch-cuda-global"))
def case_first_use(ctx, _):
    """Tensors allocated at least 10 ms before their first collective never wait for their
    registration (comm.stats()["first_use_waits"] does not grow), and they are new
    registrations (registrations_started grows)."""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    torch = k.torch
    keep = []
    before = comm.stats()
    for i, mib in enumerate((48, 96, 160)):
        t = k.empty((mib << 18,), "float32")  # mib MiB: a new segment, a new registration
        t.fill_(float(me + 1 + i))
        torch.cuda.synchronize()
        time.sleep(0.010)
        comm.all_reduce(t)
        keep.append((t, i))
    torch.cuda.synchronize()
    after = comm.stats()
    for t, i in keep:
        ctx.expect_values(t[:4096], np.full(4096, float(n * (n + 1) // 2 + n * i)),
                          f"all_reduce of tensor {i}")
    ctx.expect(after["first_use_waits"] == before["first_use_waits"],
               f"first_use_waits {before['first_use_waits']} -> {after['first_use_waits']} "
               f"({after['first_use_wait_ns'] - before['first_use_wait_ns']} ns)")
    ctx.expect(after["registrations_started"] > before["registrations_started"],
               "no new registration: the tensors came from memory registered earlier")
    ctx.expect(after["zero_copy_ops"] >= before["zero_copy_ops"] + 3,
               f"zero_copy_ops {before['zero_copy_ops']} -> {after['zero_copy_ops']}")
    ctx.expect(after["staged_ops"] == before["staged_ops"],
               f"staged_ops {before['staged_ops']} -> {after['staged_ops']}")


@case("global_allocator", kinds=("torch-cuda-global",))
def case_global_allocator(ctx, _):
    """With use_weft_allocator every tensor is weft memory: plain torch tensors and their
    interior views take the zero-copy path (payloads past the push path, which reads no user
    buffer remotely: PAST_PUSH_COUNT); freeing them works; a second switch is refused with a
    clear error."""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    torch = k.torch
    count = PAST_PUSH_COUNT
    vals = [gen_values(ctx.rng(r), count, "float32", "sum") for r in range(n)]
    big = torch.zeros(3 * count, device="cuda")
    view = big[count:2 * count]
    view.copy_(torch.from_numpy(vals[me].astype(np.float32)))
    torch.cuda.synchronize()
    time.sleep(0.05)
    before = comm.stats()
    comm.all_reduce(view)
    torch.cuda.synchronize()
    after = comm.stats()
    ctx.expect_values(view, np.stack(vals).sum(axis=0), "all_reduce on an interior view")
    if n > 1:
        ctx.expect(after["zero_copy_ops"] == before["zero_copy_ops"] + 1,
                   f"zero_copy_ops {before['zero_copy_ops']} -> {after['zero_copy_ops']}")
        ctx.expect(after["staged_ops"] == before["staged_ops"],
                   f"staged_ops {before['staged_ops']} -> {after['staged_ops']}")
    for _ in range(50):  # allocate and free through weft_torch_alloc / weft_torch_free
        tmp = torch.ones(1 << 16, device="cuda")
        comm.all_reduce(tmp)
        del tmp
    torch.cuda.synchronize()
    import weft.torch

    ctx.expect_raises(RuntimeError, lambda: weft.torch.use_weft_allocator(comm),
                      "a second use_weft_allocator", "before the first CUDA allocation")


@case("pool_outlives_comm", kinds=("torch-cuda",))
def case_pool_outlives_comm(ctx, _):
    """A pool tensor whose communicator was destroyed while it lived: binding another
    communicator is refused while PyTorch holds that memory (the new communicator may map the
    same addresses, and PyTorch's later free would release its memory); once the tensor and its
    pool are gone, a pool on the new communicator works and its all_reduce is exact."""
    k, n, me = ctx.kind, ctx.n, ctx.rank
    torch = k.torch
    import weft.torch

    count = PAST_PUSH_COUNT
    c2 = weft.init()
    pool2 = weft.torch.mem_pool(c2)
    with torch.cuda.use_mem_pool(pool2):
        stale = torch.full((count,), -1.0, device="cuda")
    torch.cuda.synchronize()
    c2.destroy()
    with weft.init() as c3:
        ctx.expect_raises(weft.WeftError, lambda: weft.torch.mem_pool(c3),
                          "mem_pool while a destroyed communicator's tensor lives", "still holds")
        del stale
        torch.cuda.empty_cache()
        del pool2
        gc.collect()
        pool3 = weft.torch.mem_pool(c3)
        with torch.cuda.use_mem_pool(pool3):
            t = torch.full((count,), float(me + 1), device="cuda")
        c3.all_reduce(t)
        torch.cuda.synchronize()
        ctx.expect_values(t, np.full(count, float(n * (n + 1) // 2)),
                          "all_reduce on the new communicator's pool")
        del t
        torch.cuda.empty_cache()
        del pool3
        gc.collect()


@case("wrong_device_kind", kinds=CUDA_KINDS)
def case_wrong_device_kind(ctx, _):
    """Host memory on a CUDA-backend communicator is refused before anything is sent."""
    k, comm = ctx.kind, ctx.comm
    torch = k.torch
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(np.ones(8, np.float32)),
                      "numpy array", "CUDA backend")
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(torch.ones(8)), "CPU tensor",
                      "CUDA backend")
    ctx.expect_raises(ValueError, lambda: comm.all_gather_into_tensor(
        k.empty((8 * ctx.n,), "float32"), torch.ones(8)), "mixed devices", "CUDA backend")
    ctx.expect_raises(ValueError, lambda: comm.empty(8), "comm.empty", "host backend")
    # Under the process-wide weft allocator every CUDA tensor must be on the communicator's
    # device (docs/python.md): no tensor on another device can be made there.
    if torch.cuda.device_count() > 1 and k.name != "torch-cuda-global":
        other = (comm.device + 1) % torch.cuda.device_count()
        ctx.expect_raises(ValueError, lambda: comm.all_reduce(
            torch.ones(8, device=f"cuda:{other}")), "another device", f"cuda:{comm.device}")


@case("cuda_on_host_backend", kinds=("torch-cuda-hostcomm",))
def case_cuda_on_host_backend(ctx, _):
    """CUDA tensors on a host-backend communicator are refused before anything is sent, and
    weft.torch refuses a host-backend communicator."""
    k, comm = ctx.kind, ctx.comm
    torch = k.torch
    ctx.expect(comm.backend == "host", f"backend {comm.backend}")
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(torch.ones(8, device="cuda")),
                      "CUDA tensor", "host backend")
    import weft.torch

    ctx.expect_raises(ValueError, lambda: weft.torch.mem_pool(comm), "mem_pool",
                      "needs the CUDA backend")
    t = torch.full((8,), float(ctx.rank + 1))
    comm.all_reduce(t)
    ctx.expect_values(t, np.full(8, float(ctx.n * (ctx.n + 1) // 2)),
                      "CPU all_reduce afterwards")

