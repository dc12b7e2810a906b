"""Multi-rank worker of the Python tests. Run under weftrun, every rank makes one communicator,
runs the cases of one kind of buffer in the same order, and writes OUT/rank<r>.json:
{"seed", "rank", "size", "kind", "results": {case: "ok" | "FAIL: ..."}}.

    weftrun -n 3 python worker.py --out DIR --kind numpy --seed 123 [--cases a,b]

Kinds: numpy (host backend), torch-cpu (host backend), torch-cuda (CUDA backend, tensors from
PyTorch's own allocator: the staged path), torch-cuda-pool (CUDA backend, tensors from
weft.torch.mem_pool: the zero-copy path), torch-cuda-global (CUDA backend, every tensor from
weft.torch.use_weft_allocator), torch-cuda-hostcomm (host backend with CUDA tensors: only the
cases that expect that to be refused). GPU-only cases live in cases_gpu.py.

Inputs are exact in every dtype (small integers, or multiples of 1/8 for min/max), so results
are compared exactly (float16/bfloat16 sum and avg: exact in float32, which they add in, but not
in 16 bits; see spread16); every rank generates every rank's inputs from (seed, case, rank) and so
knows the expected output. Outputs are poisoned first and framed by guard regions that must
keep their poison. A failed check is recorded and the case goes on, so that every rank still
makes the same sequence of calls.
"""

import argparse
import contextlib
import importlib
import json
import os
import sys
import threading
import time
import traceback
import zlib

import numpy as np

import weft
import weft._lib

POISON = 0xA5
GUARD = 16  # elements of poison on each side of an output
OPS = ("sum", "prod", "min", "max", "avg")
INT_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64")
# float32 elements of a payload past the host's inline limit (256 bytes) and the CUDA push path's
# largest automatic limit (WEFT_CUDA_PUSH_BYTES: 64 KiB, 512 KiB for two ranks on two GPUs): an
# all_reduce of it reads user buffers remotely, so it is zero-copy or staged.
PAST_PUSH_COUNT = 131075


# -- kinds of buffers -------------------------------------------------------------------------


class NumpyKind:
    name = "numpy"
    dtypes = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
              "float64")

    def array(self, values, dtype):
        return np.ascontiguousarray(np.asarray(values).astype(dtype))

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def weft_empty(self, comm, shape, dtype):
        return comm.empty(shape, dtype)

    def plain_array(self, values, dtype):
        return self.array(values, dtype)

    def copy_into(self, dst, src):
        np.copyto(dst, src)

    def poison(self, buf):
        buf.reshape(-1).view(np.uint8).fill(POISON)

    def raw_bytes(self, buf):
        return buf.reshape(-1).view(np.uint8).copy()

    def values(self, buf):
        """buf as float64 (float dtypes) or int64 numpy values."""
        a = np.asarray(buf)
        return a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64)

    def round_f32(self, values, dtype):
        """float32 values rounded to dtype (to nearest even), as float64."""
        return np.asarray(values, np.float32).astype(dtype).astype(np.float64)

    def sync(self):
        pass


class TorchKind:
    dtypes = ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")

    def __init__(self, name, device, pool=None):
        import torch

        self.torch = torch
        self.name = name
        self.device = device
        self.pool = pool

    def _tdtype(self, dtype):
        return getattr(self.torch, dtype)

    def _alloc(self, fn):
        if self.pool is None:
            return fn()
        with self.torch.cuda.use_mem_pool(self.pool):
            return fn()

    def array(self, values, dtype):
        torch = self.torch
        values = np.asarray(values)
        src = values.astype(np.float64 if values.dtype.kind == "f" else np.int64)
        host = torch.from_numpy(np.ascontiguousarray(src)).to(self._tdtype(dtype))
        out = self.empty(tuple(values.shape), dtype)
        out.copy_(host)
        return out

    def empty(self, shape, dtype):
        return self._alloc(
            lambda: self.torch.empty(shape, dtype=self._tdtype(dtype), device=self.device)
        )

    def weft_empty(self, comm, shape, dtype):
        return self.empty(shape, dtype)

    def plain_array(self, values, dtype):
        """Like array, from PyTorch's own allocator even for the pool kind."""
        pool, self.pool = self.pool, None
        try:
            return self.array(values, dtype)
        finally:
            self.pool = pool

    def copy_into(self, dst, src):
        dst.copy_(src)

    def poison(self, buf):
        buf.reshape(-1).view(self.torch.uint8).fill_(POISON)

    def raw_bytes(self, buf):
        return buf.reshape(-1).view(self.torch.uint8).cpu().numpy().copy()

    def values(self, buf):
        torch = self.torch
        t = buf.detach().cpu()
        if t.dtype.is_floating_point:
            return t.to(torch.float64).numpy()
        return t.to(torch.int64).numpy()

    def round_f32(self, values, dtype):
        torch = self.torch
        t = torch.from_numpy(np.ascontiguousarray(np.asarray(values, np.float32)))
        return t.to(self._tdtype(dtype)).to(torch.float64).numpy()

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()


# -- the case context -------------------------------------------------------------------------


class Ctx:
    def __init__(self, comm, kind, seed, case_id):
        self.comm = comm
        self.kind = kind
        self.seed = seed
        self.case_id = case_id
        self.n = comm.size
        self.rank = comm.rank
        self.failures = []

    def rng(self, rank, *salt):
        return np.random.default_rng([self.seed, self.case_id, rank, *salt])

    def expect(self, cond, message):
        if not cond and len(self.failures) < 20:
            self.failures.append(message)

    def expect_values(self, buf, want, what):
        """buf (array or tensor) must hold exactly want (numpy values)."""
        got = self.kind.values(buf)
        want = np.asarray(want).reshape(got.shape)
        if not np.array_equal(got, want):
            bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
            i = int(bad[0]) if bad.size else -1
            self.expect(
                False,
                f"{what}: {bad.size} of {got.size} elements differ; first at {i}: got "
                f"{got.reshape(-1)[i]!r}, expected {want.reshape(-1)[i]!r}",
            )

    def expect_raises(self, exc_type, fn, what, contains=None):
        try:
            fn()
        except exc_type as exc:
            if contains is not None and contains not in str(exc):
                self.expect(False, f"{what}: message {str(exc)!r} lacks {contains!r}")
            return exc
        except Exception as exc:  # noqa: BLE001 - the wrong exception is the failure
            self.expect(False, f"{what}: raised {type(exc).__name__}: {exc}, expected "
                               f"{exc_type.__name__}")
            return None
        self.expect(False, f"{what}: raised nothing, expected {exc_type.__name__}")
        return None

    def framed(self, count, dtype, shape_tail=()):
        """An output of count rows (each shape_tail) inside a poisoned buffer with GUARD rows of
        poison on each side. Returns (whole, output)."""
        whole = self.kind.empty((count + 2 * GUARD,) + tuple(shape_tail), dtype)
        self.kind.poison(whole)
        return whole, whole[GUARD:GUARD + count]

    def expect_guards(self, whole, count, what):
        raw = self.kind.raw_bytes(whole)
        per_row = raw.size // (count + 2 * GUARD)
        head, tail = raw[: GUARD * per_row], raw[(GUARD + count) * per_row:]
        self.expect(bool(np.all(head == POISON)) and bool(np.all(tail == POISON)),
                    f"{what}: the guard bytes around the output were overwritten")


# -- inputs and expected values ---------------------------------------------------------------


# float16 and bfloat16 sum and avg add in float32 and round once (weft.h), which small integers
# cannot tell from adding in 16 bits. Their inputs are +-m * 2^e, m of the full significand width
# p (m in [2^(p-1), 2^p)), e in [0, w], w such that a sum of up to 8 of them stays below 2^15
# (float16: finite) or 2^24 (bfloat16): every partial sum, in any order, is exact in float32 but
# needs more than p bits, so from 3 ranks a reduction that rounds partial sums to 16 bits gets
# 15-50% of the elements wrong (2 ranks add once: rounding early changes nothing). dtype: (p, w).
SPREAD16 = {"float16": (11, 1), "bfloat16": (8, 13)}


def spread16(rng, count, dtype):
    """count spread inputs of a 16-bit float dtype (see SPREAD16), as float64."""
    p, w = SPREAD16[dtype]
    m = rng.integers(1 << (p - 1), 1 << p, size=count)
    e = rng.integers(0, w + 1, size=count)
    sign = rng.choice(np.array([-1, 1]), size=count)
    return (sign * m * 2.0**e).astype(np.float64)


def gen_values(rng, count, dtype, op):
    """count values exact in dtype whose reduction by op over up to 8 ranks is exact too (in
    float32 for float16/bfloat16 sum and avg, which reduce in float32)."""
    unsigned = dtype.startswith("uint")
    if op in ("sum", "avg") and dtype in SPREAD16:
        return spread16(rng, count, dtype)
    if op in ("sum", "avg"):
        lo = 0 if unsigned else -3
        return rng.integers(lo, 4, size=count).astype(np.float64)
    if op == "prod":
        choices = np.array([1.0, 2.0] if unsigned else [-1.0, 1.0, 2.0])
        return rng.choice(choices, size=count)
    if dtype in INT_DTYPES:
        lo = 0 if unsigned else -100
        return rng.integers(lo, 101, size=count).astype(np.float64)
    return rng.integers(-128, 129, size=count) / 8.0


def reduce_expected(kind, stack, op, dtype):
    """The exact result of reducing the rows of stack (float64 values) by op, in dtype."""
    n = stack.shape[0]
    if op == "sum":
        r = stack.sum(axis=0)
    elif op == "prod":
        r = stack.prod(axis=0)
    elif op == "min":
        r = stack.min(axis=0)
    elif op == "max":
        r = stack.max(axis=0)
    else:
        s = stack.sum(axis=0)
        if dtype in INT_DTYPES:
            r = np.trunc(s / n)  # exact: |s| is small
        elif dtype == "float64":
            r = s / n
        else:
            r = np.float32(s.astype(np.float32)) / np.float32(n)
    if dtype in INT_DTYPES:
        return r.astype(np.int64)
    if dtype == "float64":
        return r
    return kind.round_f32(r, dtype)


# -- cases ------------------------------------------------------------------------------------

CASES = []  # (name, function(ctx, arg), arg, kinds or None for all)


def case(name, kinds=None, per_dtype=False, dtypes=None):
    def register(fn):
        if per_dtype:
            for dtype in dtypes or NumpyKind.dtypes + ("bfloat16",):
                CASES.append((f"{name}[{dtype}]", fn, dtype, kinds))
        else:
            CASES.append((name, fn, None, kinds))
        return fn

    return register


ALL_DTYPES = NumpyKind.dtypes + ("bfloat16",)


@case("all_reduce", per_dtype=True)
def case_all_reduce(ctx, dtype):
    k, comm = ctx.kind, ctx.comm
    for op in OPS:
        for count in (0, 1, 4099):
            vals = [gen_values(ctx.rng(r, OPS.index(op), count), count, dtype, op)
                    for r in range(ctx.n)]
            t = k.array(vals[ctx.rank], dtype)
            ret = comm.all_reduce(t, op)
            k.sync()
            ctx.expect(ret is t, "all_reduce does not return its tensor")
            want = reduce_expected(k, np.stack(vals) if count else np.zeros((ctx.n, 0)), op,
                                   dtype)
            ctx.expect_values(t, want, f"all_reduce {op} count {count}")


@case("all_reduce_large", dtypes=("float32",), per_dtype=True)
def case_all_reduce_large(ctx, dtype):
    """Past the in-place two-shot threshold (1 MiB) and, from 3 ranks, the two-shot one."""
    k = ctx.kind
    count = (3 << 20) // 4 + 3
    vals = [gen_values(ctx.rng(r), count, dtype, "sum") for r in range(ctx.n)]
    t = k.array(vals[ctx.rank], dtype)
    ctx.comm.all_reduce(t)
    k.sync()
    ctx.expect_values(t, np.stack(vals).sum(axis=0), f"all_reduce sum count {count}")


@case("all_gather", per_dtype=True)
def case_all_gather(ctx, dtype):
    k, comm, n = ctx.kind, ctx.comm, ctx.n
    for count in (0, 1, 1031):
        vals = [gen_values(ctx.rng(r, count), count, dtype, "max") for r in range(n)]
        want = np.concatenate(vals) if count else np.zeros(0)
        inp = k.array(vals[ctx.rank], dtype)
        whole, out = ctx.framed(count * n, dtype)
        comm.all_gather_into_tensor(out, inp)
        k.sync()
        ctx.expect_values(out, want, f"all_gather count {count}")
        ctx.expect_values(inp, vals[ctx.rank], f"all_gather count {count}: input changed")
        ctx.expect_guards(whole, count * n, f"all_gather count {count}")
        # In place: the input is this rank's block of the output.
        buf = k.array(np.concatenate([v if r == ctx.rank else np.zeros(count)
                                      for r, v in enumerate(vals)]), dtype)
        comm.all_gather_into_tensor(buf, buf[ctx.rank * count:(ctx.rank + 1) * count])
        k.sync()
        ctx.expect_values(buf, want, f"all_gather in place count {count}")


@case("reduce_scatter", per_dtype=True)
def case_reduce_scatter(ctx, dtype):
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    for op in OPS:
        for count in (0, 1, 1031):
            vals = [gen_values(ctx.rng(r, OPS.index(op), count), count * n, dtype, op)
                    for r in range(n)]
            full = reduce_expected(k, np.stack(vals), op, dtype)
            want = full[me * count:(me + 1) * count]
            inp = k.array(vals[me], dtype)
            whole, out = ctx.framed(count, dtype)
            comm.reduce_scatter_tensor(out, inp, op)
            k.sync()
            ctx.expect_values(out, want, f"reduce_scatter {op} count {count}")
            ctx.expect_guards(whole, count, f"reduce_scatter {op} count {count}")
            # In place: the output is this rank's block of the input.
            comm.reduce_scatter_tensor(inp[me * count:(me + 1) * count], inp, op)
            k.sync()
            ctx.expect_values(inp[me * count:(me + 1) * count], want,
                              f"reduce_scatter in place {op} count {count}")


@case("broadcast", per_dtype=True)
def case_broadcast(ctx, dtype):
    k, comm = ctx.kind, ctx.comm
    for root in range(ctx.n):
        for count in (1, 4099):
            vals = gen_values(ctx.rng(root, count), count, dtype, "max")
            whole, t = ctx.framed(count, dtype)
            if ctx.rank == root:
                k.copy_into(t, k.array(vals, dtype))
            comm.broadcast(t, root)
            k.sync()
            ctx.expect_values(t, vals, f"broadcast root {root} count {count}")
            ctx.expect_guards(whole, count, f"broadcast root {root} count {count}")


def _a2a_rows(ctx, salt):
    """rows[p][q]: how many rows rank p sends rank q (0 to 4), the same on every rank."""
    rng = np.random.default_rng([ctx.seed, ctx.case_id, 99, salt])
    return rng.integers(0, 5, size=(ctx.n, ctx.n))


@case("all_to_all", per_dtype=True)
def case_all_to_all(ctx, dtype):
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    tail = (3,)

    def rows_of(p, total):
        return gen_values(ctx.rng(p, total), total * 3, dtype, "max").reshape(total, 3)

    # Even blocks: 2 rows per peer.
    per = 2
    data = [rows_of(p, per * n) for p in range(n)]
    want = np.concatenate([data[p][me * per:(me + 1) * per] for p in range(n)])
    whole, out = ctx.framed(per * n, dtype, tail)
    comm.all_to_all_single(out, k.array(data[me], dtype))
    k.sync()
    ctx.expect_values(out, want, "all_to_all_single even")
    ctx.expect_guards(whole, per * n, "all_to_all_single even")

    # Uneven blocks, and each side's split sizes left out in turn where that side is even.
    rows = _a2a_rows(ctx, 0)
    data = [rows_of(p, int(rows[p].sum())) for p in range(n)]
    offs = [np.concatenate([[0], np.cumsum(rows[p])]) for p in range(n)]
    want = np.concatenate([data[p][offs[p][me]:offs[p][me + 1]] for p in range(n)]
                          + [np.zeros((0, 3))])
    total_in = int(rows.sum(axis=1)[me])
    total_out = int(rows[:, me].sum())
    whole, out = ctx.framed(total_out, dtype, tail)
    comm.all_to_all_single(out, k.array(data[me], dtype), [int(x) for x in rows[:, me]],
                           [int(x) for x in rows[me]])
    k.sync()
    ctx.expect_values(out, want, "all_to_all_single uneven")
    ctx.expect_guards(whole, total_out, "all_to_all_single uneven")
    ctx.expect(total_in == data[me].shape[0], "test setup")

    # Input even (2 rows to each), output uneven: everybody sends 2 rows to everybody.
    data = [rows_of(p, 2 * n) for p in range(n)]
    want = np.concatenate([data[p][me * 2:(me + 1) * 2] for p in range(n)])
    out = k.empty((2 * n, 3), dtype)
    k.poison(out)
    comm.all_to_all_single(out, k.array(data[me], dtype), output_split_sizes=[2] * n)
    k.sync()
    ctx.expect_values(out, want, "all_to_all_single output splits only")
    out = k.empty((2 * n, 3), dtype)
    k.poison(out)
    comm.all_to_all_single(out, k.array(data[me], dtype), input_split_sizes=[2] * n)
    k.sync()
    ctx.expect_values(out, want, "all_to_all_single input splits only")


@case("device")
def case_device(ctx, _):
    """comm.device is the library's (weft_comm_device): None on the host backend, else the
    visible device the communicator's memory and kernels are on."""
    comm = ctx.comm
    if comm.backend == "host":
        ctx.expect(comm.device is None, f"host backend: comm.device is {comm.device!r}")
        return
    torch = getattr(ctx.kind, "torch", None)
    count = torch.cuda.device_count() if torch is not None else 1 << 30
    ctx.expect(isinstance(comm.device, int) and 0 <= comm.device < count,
               f"comm.device {comm.device!r} is not one of the {count} visible devices")


@case("barrier")
def case_barrier(ctx, _):
    """Nobody leaves the barrier before the last rank entered it."""
    comm = ctx.comm
    time.sleep(0.02 * ((ctx.rank * 7) % ctx.n))
    entered = time.time()
    comm.barrier()
    left = time.time()
    stamps = ctx.kind.empty((ctx.n,), "float64")
    comm.all_gather_into_tensor(stamps, ctx.kind.array(np.array([entered]), "float64"))
    ctx.kind.sync()
    stamps = ctx.kind.values(stamps)
    ctx.expect(left >= stamps.max(), f"left the barrier at {left} before rank "
                                     f"{int(stamps.argmax())} entered it at {stamps.max()}")


def _moe_inputs(ctx, rank, dtype, num_experts, topk, hidden):
    """Rank rank's tokens, routing and weights. The last rank has no tokens in the float16 case
    (it still takes part and receives)."""
    rng = ctx.rng(rank, 1234)
    tokens = int(rng.integers(1, 9))
    if dtype == "float16" and rank == ctx.n - 1:
        tokens = 0
    x = rng.integers(-4, 5, size=(tokens, hidden)).astype(np.float64)
    idx = np.array([rng.permutation(num_experts)[:topk] for _ in range(tokens)],
                   dtype=np.int64).reshape(tokens, topk)
    idx[rng.random((tokens, topk)) < 0.25] = -1  # masked choices
    w = (rng.integers(1, 9, size=(tokens, topk)) / 8.0).astype(np.float32)
    return x, idx, w


@case("moe", per_dtype=True, dtypes=("float32", "float16", "bfloat16"))
def case_moe(ctx, dtype):
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    per_rank, topk, hidden = 2, 3, 5
    num_experts = per_rank * n
    topk = min(topk, num_experts)
    inputs = [_moe_inputs(ctx, r, dtype, num_experts, topk, hidden) for r in range(n)]
    x, idx, w = inputs[me]
    res = comm.moe_dispatch(k.array(x, dtype), k.array(idx, "int64"), k.array(w, "float32"),
                            num_experts)
    k.sync()
    # Expected: tokens from each source rank in order, each once per rank owning an expert.
    rx, ridx, rw, counts = [], [], [], np.zeros(per_rank, np.int64)
    for p in range(n):
        px, pidx, pw = inputs[p]
        for t in range(px.shape[0]):
            mine = [(j, e) for j, e in enumerate(pidx[t]) if e >= 0 and e // per_rank == me]
            if not mine:
                continue
            rx.append(px[t])
            row_i = np.full(topk, -1, np.int64)
            row_w = np.zeros(topk, np.float64)
            for j, e in mine:
                row_i[j] = e - me * per_rank
                row_w[j] = pw[t, j]
                counts[e - me * per_rank] += 1
            ridx.append(row_i)
            rw.append(row_w)
    num = len(rx)
    ctx.expect(res.num_recv_tokens == num, f"moe num_recv_tokens {res.num_recv_tokens}, "
                                           f"expected {num}")
    ctx.expect_values(res.num_recv_tokens_written, [num], "moe *num_recv_tokens the library wrote")
    if res.num_recv_tokens != num:
        return
    ctx.expect_values(res.recv_x, np.array(rx).reshape(num, hidden), "moe recv_x")
    ctx.expect_values(res.recv_topk_idx, np.array(ridx).reshape(num, topk), "moe recv_topk_idx")
    ctx.expect_values(res.recv_topk_weights, np.array(rw).reshape(num, topk),
                      "moe recv_topk_weights")
    ctx.expect_values(res.recv_expert_counts, counts, "moe recv_expert_counts")
    # Combine: each rank returns its rows times (rank + 1); token t gets the sum over the
    # ranks that received it.
    y = k.array(np.array(rx).reshape(num, hidden) * (me + 1), dtype)
    out = comm.moe_combine(res.handle, y)
    k.sync()
    want = np.zeros_like(x)
    for t in range(x.shape[0]):
        owners = {int(e) // per_rank for e in idx[t] if e >= 0}
        want[t] = x[t] * sum(r + 1 for r in owners)
    ctx.expect_values(out, k.round_f32(want, dtype) if dtype != "float32" else want,
                      "moe_combine")
    # A second combine on the same handle, into a given output.
    out2 = k.empty((x.shape[0], hidden), dtype)
    k.poison(out2)
    comm.moe_combine(res.handle, y, out2)
    k.sync()
    ctx.expect_values(out2, k.round_f32(want, dtype) if dtype != "float32" else want,
                      "moe_combine again into out")
    # The backward pass: new rows along the same routing (the handle's layout reused), then a
    # combine of them with the same handle.
    x2 = -2 * x
    back = comm.moe_dispatch(k.array(x2, dtype), handle=res.handle)
    k.sync()
    ctx.expect(back.handle is res.handle and back.recv_topk_idx is None,
               "moe_dispatch with handle: the handle and no routing outputs")
    ctx.expect_values(back.num_recv_tokens_written, [num],
                      "moe *num_recv_tokens the library wrote (reuse)")
    rx2 = [-2 * row for row in rx]
    ctx.expect_values(back.recv_x, np.array(rx2).reshape(num, hidden), "moe recv_x (reuse)")
    out3 = comm.moe_combine(res.handle, k.array(np.array(rx2).reshape(num, hidden) * (me + 1),
                                                dtype))
    k.sync()
    ctx.expect_values(out3, k.round_f32(-2 * want, dtype) if dtype != "float32" else -2 * want,
                      "moe_combine after the reuse")
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(k.array(x2, dtype), idx,
                                                            handle=res.handle),
                      "moe_dispatch with both handle and a routing")
    res.handle.close()


@case("moe_recv_count_checked", kinds=("numpy", "torch-cpu"))
def case_moe_recv_count_checked(ctx, _):
    """On the host backend moe_dispatch compares the *num_recv_tokens the library wrote with
    the count it sized the outputs by. Every rank announces one token more for rank 0 than it
    sends, so rank 0 sizes for n more than it receives: it raises WeftError (and destroys the
    C handle it got), the others succeed."""
    import weft._comm as weft_comm

    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    num_experts = 2 * n
    x, idx, w = _moe_inputs(ctx, me, "float32", num_experts, 2, 4)
    real = weft_comm._tokens_per_rank

    def inflated(*args):
        counts = real(*args)
        counts[0] += 1
        return counts

    destroyed = []
    made = []  # the ctypes out-parameter of this case's weft_moe_dispatch (*handle)
    weft_comm._tokens_per_rank = inflated
    try:
        with library_hook("weft_moe_handle_destroy", lambda h: destroyed.append(h.value)), \
                library_hook("weft_moe_dispatch", lambda *args: made.append(args[15]._obj)):
            if me == 0:
                err = ctx.expect_raises(weft.WeftError, lambda: comm.moe_dispatch(
                    k.array(x, "float32"), k.array(idx, "int64"), k.array(w, "float32"),
                    num_experts), "dispatch sized for more than it receives",
                    "wrote num_recv_tokens")
                if err is not None:
                    ctx.expect(err.status == "WEFT_ERR_INTERNAL", f"status {err.status}")
                # Only this dispatch's handle: other handles of the shared communicator may
                # be freed in the same span (garbage-collected ones, at its next operation).
                mine = made[0].value if len(made) == 1 else None
                ctx.expect(mine is not None and destroyed.count(mine) == 1,
                           f"the dispatch's handle {mine} was destroyed "
                           f"{destroyed.count(mine)} time(s) (destroys: {destroyed})")
            else:
                res = comm.moe_dispatch(k.array(x, "float32"), k.array(idx, "int64"),
                                        k.array(w, "float32"), num_experts)
                ctx.expect_values(res.num_recv_tokens_written, [res.num_recv_tokens],
                                  "*num_recv_tokens on a rank sized right")
                res.handle.close()
    finally:
        weft_comm._tokens_per_rank = real
    # Still usable.
    t = k.array(np.full(4, me + 1), "int32")
    comm.all_reduce(t)
    k.sync()
    ctx.expect_values(t, np.full(4, n * (n + 1) // 2), "all_reduce after the check")


@case("moe_handle_in_use_at_destroy", kinds=("numpy",))
def case_moe_handle_in_use_at_destroy(ctx, _):
    """A MoE handle in use by a call (pinned, as moe_combine pins it) while its communicator is
    destroyed: destroy() leaves it to that call, and the end of the call destroys it
    (weft_moe_handle_destroy, exactly once), after the communicator is gone."""
    n = ctx.n
    destroyed = []
    with library_hook("weft_moe_handle_destroy", lambda h: destroyed.append(h.value)):
        c2 = weft.init()
        res = c2.moe_dispatch(np.ones((2, 4), np.float32), np.zeros((2, 1), np.int64),
                              np.ones((2, 1), np.float32), n)
        value = res.handle._handle.value
        with res.handle._pinned("test"):
            c2.destroy()
            ctx.expect(value not in destroyed, "destroy() freed a MoE handle in use")
            ctx.expect(res.handle.closed, "destroy() did not close the MoE handle")
        ctx.expect(destroyed == [value], f"after its last use the handle was destroyed "
                                         f"{destroyed.count(value)} time(s) (calls {destroyed})")


@case("moe_destroy_outside_locks", kinds=("numpy",))
def case_moe_destroy_outside_locks(ctx, _):
    """weft_moe_handle_destroy (which waits for the device on CUDA) never runs under the
    communicator's _state_lock, which abort() needs: not from close(), the end of a call that
    used a closed handle, destroy(), nor garbage collection; a garbage-collected handle is not
    destroyed by its finalizer (which may run anywhere, even during CUDA-graph capture) but at
    the communicator's next operation, or at its destroy()."""
    import gc

    n = ctx.n
    calls = []  # (handle, whether this thread held the state lock of the handle's comm)
    comms = []

    def record(h):
        held = any(c._state_lock._is_owned() for c in comms)
        calls.append((h.value, held))

    def dispatch(comm):
        res = comm.moe_dispatch(np.ones((2, 4), np.float32), np.zeros((2, 1), np.int64),
                                np.ones((2, 1), np.float32), n)
        return res, res.handle._handle.value

    with library_hook("weft_moe_handle_destroy", record):
        c2 = weft.init()
        comms.append(c2)
        res, h = dispatch(c2)  # close()
        res.handle.close()
        ctx.expect(calls == [(h, False)], f"close(): {calls}")
        calls.clear()
        res, h = dispatch(c2)  # closed while in use: freed at the end of the call
        with res.handle._pinned("test"):
            res.handle.close()
            ctx.expect(calls == [], f"close() in use: {calls}")
        ctx.expect(calls == [(h, False)], f"end of the last use: {calls}")
        calls.clear()
        res, h = dispatch(c2)  # garbage-collected: at the next operation
        del res
        gc.collect()
        ctx.expect(calls == [], f"the finalizer called the library: {calls}")
        c2.barrier()
        ctx.expect(calls == [(h, False)], f"the next operation after the finalizer: {calls}")
        calls.clear()
        res, h = dispatch(c2)  # open at destroy()
        res2, h2 = dispatch(c2)  # garbage-collected before destroy()
        del res2
        gc.collect()
        c2.destroy()
        ctx.expect(sorted(calls) == sorted([(h, False), (h2, False)]), f"destroy(): {calls}")
        ctx.expect(res.handle.closed, "destroy() did not close the open handle")


def _destroy_counter():
    """(hook, counts): a before-hook for weft_moe_handle_destroy that counts each handle's
    destroys, and makes the real call skip a repeat (a double destroy would free freed memory
    and crash the worker instead of failing the case): use with library_hook's real."""
    counts = {}

    def hook(real):
        def destroy(h):
            v = h.value if hasattr(h, "value") else h
            counts[v] = counts.get(v, 0) + 1
            return 0 if counts[v] > 1 else real(h)
        return destroy

    return hook, counts


@contextlib.contextmanager
def counted_moe_destroys():
    """Within the block, weft_moe_handle_destroy counts its calls per handle (yields the dict)
    and never destroys a handle twice."""
    lib = weft._lib.library()
    real = lib.weft_moe_handle_destroy
    hook, counts = _destroy_counter()
    lib.weft_moe_handle_destroy = hook(real)
    try:
        yield counts
    finally:
        lib.weft_moe_handle_destroy = real


@case("moe_finalizer_races_destroy", kinds=("numpy",))
def case_moe_finalizer_races_destroy(ctx, _):
    """A MoeHandle's finalizer on one thread racing comm.destroy() on another (CPython runs
    __del__ before it clears weak references, so destroy() still finds the handle): the C
    handle is destroyed exactly once, wherever in __del__ destroy() runs. Deterministic: a
    trace function stops the finalizer before its k-th line (and before it returns), for every
    k, while destroy() runs; nothing is left queued on the destroyed communicator."""
    import sys

    import weft._comm as weft_comm

    del_code = weft_comm.MoeHandle.__del__.__code__
    n = ctx.n
    with counted_moe_destroys() as counts:
        for k in range(1, 30):
            c2 = weft.init()
            counts.clear()  # by address, which malloc reuses: this round's handle only
            res = c2.moe_dispatch(np.ones((2, 4), np.float32), np.zeros((2, 1), np.int64),
                                  np.ones((2, 1), np.float32), n)
            value = res.handle._handle.value
            holder = [res.handle]
            del res
            paused, go = threading.Event(), threading.Event()
            seen = [0]

            def tracer(frame, event, arg):
                if event != "call" or frame.f_code is not del_code:
                    return None

                def local(f, ev, a):
                    if ev in ("line", "return"):
                        seen[0] += 1
                        if seen[0] == k:
                            paused.set()
                            go.wait(30)
                    return local
                return local

            def dropper():
                sys.settrace(tracer)
                holder.pop()  # the last reference: __del__ runs here, on this thread
                sys.settrace(None)

            th = threading.Thread(target=dropper)
            th.start()
            while not paused.wait(0.002) and th.is_alive():
                pass  # until the finalizer stops, or ends before its k-th stop
            stopped = paused.is_set()
            c2.destroy()
            go.set()
            th.join()
            ctx.expect(counts.get(value) == 1, f"stop {k}: the handle was destroyed "
                                               f"{counts.get(value, 0)} time(s)")
            ctx.expect(c2._doomed == [], f"stop {k}: {len(c2._doomed)} handle(s) queued on "
                                         "the destroyed communicator")
            ctx.expect_raises(ValueError, c2.barrier, "barrier after destroy()")
            ctx.expect(counts.get(value) == 1, f"stop {k}, after a later call: the handle was "
                                               f"destroyed {counts.get(value, 0)} time(s)")
            if not stopped:
                break
        ctx.expect(k > 2, f"the finalizer stopped at only {k - 1} points")


@case("moe_dispatch_races_destroy", kinds=("numpy",))
def case_moe_dispatch_races_destroy(ctx, _):
    """comm.destroy() on one thread while moe_dispatch on another has made its C handle but
    not yet returned (stopped where it checks the count the library wrote): destroy() waits
    for the dispatch, then closes its handle; the result's handle is closed, and its C handle
    destroyed exactly once, by destroy(). Deterministic: the dispatch stops until destroy()
    either returned or waits for the operation lock."""
    import gc

    n = ctx.n
    c2 = weft.init()
    with counted_moe_destroys() as counts:  # (by address, which malloc reuses: after init)
        real_lock = c2._lock
        destroy_waits, destroyed, paused, go = (threading.Event() for _ in range(4))

        class SignallingLock:
            """c2._lock, telling when the destroying thread asks for it."""

            def __enter__(self):
                if threading.current_thread().name == "destroyer":
                    destroy_waits.set()
                return real_lock.__enter__()

            def __exit__(self, *exc):
                return real_lock.__exit__(*exc)

        c2._lock = SignallingLock()
        real_check = c2._check_num_recv

        def stopping_check(*args):
            paused.set()
            go.wait(30)
            return real_check(*args)

        c2._check_num_recv = stopping_check
        out = {}

        def dispatch():
            try:
                out["res"] = c2.moe_dispatch(np.ones((2, 4), np.float32),
                                             np.zeros((2, 1), np.int64),
                                             np.ones((2, 1), np.float32), n)
            except Exception as exc:  # noqa: BLE001 - checked below
                out["error"] = exc

        def destroy():
            c2.destroy()
            destroyed.set()

        th = threading.Thread(target=dispatch)
        th.start()
        ctx.expect(paused.wait(30), "the dispatch never reached its check")
        td = threading.Thread(target=destroy, name="destroyer")
        td.start()
        deadline = time.monotonic() + 30
        while not (destroy_waits.is_set() or destroyed.is_set()) and \
                time.monotonic() < deadline:
            time.sleep(0.001)
        go.set()
        th.join()
        td.join()
        ctx.expect("error" not in out, f"moe_dispatch failed: {out.get('error')!r}")
        res = out.pop("res", None)
        if res is not None:
            value = res.handle._handle.value if res.handle._handle is not None else None
            ctx.expect(res.handle.closed, "moe_dispatch returned an open handle although "
                                          "destroy() had begun")
            handles = [v for v in counts]
            ctx.expect(len(handles) == 1 and counts[handles[0]] == 1 and value is None,
                       f"destroys per handle after destroy(): {counts}, left {value}")
            del res
            gc.collect()
        ctx.expect(c2._doomed == [], f"{len(c2._doomed)} handle(s) queued on the destroyed "
                                     "communicator")
        ctx.expect(all(c == 1 for c in counts.values()) and len(counts) == 1,
                   f"destroys per handle at the end: {counts}")


@case("moe_gc_cuda_no_implicit_free", kinds=("numpy",))
def case_moe_gc_cuda_no_implicit_free(ctx, _):
    """On the CUDA backend a garbage-collected MoE handle is not freed by the next collective
    (its destroy waits for the device, which breaks a CUDA graph captured in global mode on any
    thread), only by free_moe_handles(), MoeHandle.close() or destroy(). The host backend has
    no such restriction and frees it at the next operation. Checked on a host communicator
    that claims the CUDA backend for the span of one barrier (torch is not imported here, so
    the barrier takes no stream)."""
    import gc

    n = ctx.n
    destroyed = []
    with library_hook("weft_moe_handle_destroy", lambda h: destroyed.append(h.value)):
        c2 = weft.init()

        def gc_handle():
            res = c2.moe_dispatch(np.ones((2, 4), np.float32), np.zeros((2, 1), np.int64),
                                  np.ones((2, 1), np.float32), n)
            value = res.handle._handle.value
            del res
            gc.collect()
            return value

        h1 = gc_handle()
        c2.backend = "cuda"
        try:
            c2.barrier()
        finally:
            c2.backend = "host"
        ctx.expect(destroyed == [], f"a collective on the CUDA backend freed {destroyed}")
        ctx.expect(c2.free_moe_handles() == 1 and destroyed == [h1],
                   f"free_moe_handles(): {destroyed}")
        h2 = gc_handle()
        c2.barrier()  # host backend: at the next operation
        ctx.expect(destroyed == [h1, h2], f"a collective on the host backend: {destroyed}")
        ctx.expect(c2.free_moe_handles() == 0, "free_moe_handles() with nothing queued")
        c2.destroy()
        ctx.expect(c2.free_moe_handles() == 0, "free_moe_handles() after destroy()")


@case("destroy_keeps_both_errors", kinds=("numpy",))
def case_destroy_keeps_both_errors(ctx, _):
    """destroy() whose body raises (the warning about a live empty() array, made an error)
    and whose weft_comm_destroy fails too (made to report WEFT_ERR_ABORTED after the real call):
    the communicator is destroyed, the warning propagates, and the library's WeftError is kept
    with it (weft_destroy_error) instead of dropped."""
    import warnings

    lib = weft._lib.library()
    real = lib.weft_comm_destroy
    aborted = weft._lib.STATUS_NAMES.index("WEFT_ERR_ABORTED")
    c2 = weft.init()
    a = c2.empty(4, np.float32)
    lib.weft_comm_destroy = lambda h: (real(h), aborted)[1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            err = ctx.expect_raises(RuntimeWarning, c2.destroy, "destroy with a live array",
                                    "still alive")
    finally:
        lib.weft_comm_destroy = real
    del a
    lost = getattr(err, "weft_destroy_error", None)
    ctx.expect(isinstance(lost, weft.WeftError) and lost.status == "WEFT_ERR_ABORTED",
               f"weft_comm_destroy's failure was not kept: {lost!r}")
    ctx.expect(repr(c2).endswith("destroyed>"), f"after destroy(): {c2!r}")


@case("allocation_finalizer_never_blocks", kinds=("numpy",))
def case_allocation_finalizer_never_blocks(ctx, _):
    """The last view of a comm.empty() array dropped while another thread holds the
    communicator's _state_lock (as a thread finalizing an allocation of another communicator
    under its own lock would: a deadlock): the finalizer returns at once, and the memory is
    freed (weft_free, once) by the communicator's next call that takes the lock."""
    freed = []
    with library_hook("weft_free", lambda comm, ptr: freed.append(ptr)):
        c2 = weft.init()
        a = c2.empty(4, np.float32)
        ptr = a.__array_interface__["data"][0]
        held, release = threading.Event(), threading.Event()

        def holder():
            with c2._state_lock:
                held.set()
                release.wait(30)

        th = threading.Thread(target=holder)
        th.start()
        ctx.expect(held.wait(30), "the holder never took the lock")
        box = [a]
        del a
        dropper = threading.Thread(target=box.clear)  # the finalizer runs on this thread
        dropper.start()
        dropper.join(5)
        ctx.expect(not dropper.is_alive(), "the finalizer blocked on the communicator's lock")
        ctx.expect(freed == [], f"freed while the lock was held: {freed}")
        release.set()
        th.join()
        dropper.join()
        c2.stats()
        ctx.expect(freed == [ptr], f"after the next call that takes the lock: {freed}, "
                                   f"expected [{ptr}]")
        c2.destroy()
        ctx.expect(freed == [ptr], f"after destroy(): {freed}")


@case("torch_unbind_failure", kinds=("numpy",))
def case_torch_unbind_failure(ctx, _):
    """destroy() of the communicator bound to PyTorch's allocator, when weft_torch_bind(NULL)
    fails (WEFT_ERR_TIMEOUT: allocations or frees still in flight on other threads), raises and
    frees nothing: the binding stays, the communicator stays usable and abortable, and a later
    destroy() unbinds and frees it. The host backend cannot bind for real, so weft.torch's
    record of the binding is set by hand and the library's unbind replaced by one that fails as
    the C function does (every rank alike, so the collectives stay in step)."""
    import weft.torch as weft_torch

    k, n, me = ctx.kind, ctx.n, ctx.rank
    lib = weft._lib.library()
    real = lib.weft_torch_bind
    timeout = weft._lib.STATUS_NAMES.index("WEFT_ERR_TIMEOUT")
    c2 = weft.init()
    weft_torch._bound = c2
    lib.weft_torch_bind = lambda comm: timeout if comm is None else real(comm)
    try:
        err = ctx.expect_raises(weft.WeftError, c2.destroy, "destroy with a failing unbind")
        if err is not None:
            ctx.expect(err.status == "WEFT_ERR_TIMEOUT", f"status {err.status}")
    finally:
        lib.weft_torch_bind = real
    ctx.expect(weft_torch._bound is c2, "the binding was dropped although the unbind failed")
    ctx.expect(c2._handle is not None, "destroy() freed the communicator after a failed unbind")
    t = k.array(np.full(4, me + 1), "int32")
    c2.all_reduce(t)  # still usable
    ctx.expect_values(t, np.full(4, n * (n + 1) // 2), "all_reduce after the failed destroy")
    c2.abort()  # and abortable
    try:
        c2.destroy()
    except weft.WeftError as exc:
        ctx.expect(False, f"destroy after abort: {exc}")
    ctx.expect(weft_torch._bound is None, "destroy() did not unbind")
    ctx.expect(c2._handle is None, "destroy() did not free the communicator")


@contextlib.contextmanager
def library_hook(name, before):
    """Within the block, every call of the library function name (through weft's ctypes
    library object, which the package looks up at each call) first runs before(*args), on the
    calling thread. Yields the real function."""
    lib = weft._lib.library()
    real = getattr(lib, name)

    def wrapper(*args):
        before(*args)
        return real(*args)

    setattr(lib, name, wrapper)
    try:
        yield real
    finally:
        setattr(lib, name, real)


@case("moe_close_in_use", kinds=("numpy", "torch-cpu"))
def case_moe_close_in_use(ctx, _):
    """handle.close() on one thread while a combine on another is blocked in C with that handle
    (from 2 ranks): the combine still gives what a combine before gave, the handle is freed only
    when it returns, and later calls with the handle raise ValueError. Ordered without sleeps:
    rank 0's thread signals from inside its call into the library, and the peers join that
    combine only after rank 0 closed the handle (a barrier on a second communicator tells
    them)."""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    per_rank, topk, hidden = 2, 2, 4
    num_experts = per_rank * n
    topk = min(topk, num_experts)
    x, idx, w = _moe_inputs(ctx, me, "float32", num_experts, topk, hidden)
    res = comm.moe_dispatch(k.array(x, "float32"), k.array(idx, "int64"),
                            k.array(w, "float32"), num_experts)
    y = k.array(np.arange(res.num_recv_tokens * hidden).reshape(-1, hidden) + 100 * me,
                "float32")
    want = comm.moe_combine(res.handle, y)
    with weft.init() as side:
        if me != 0:
            side.barrier()  # rank 0 has closed the handle while its combine waits for us
            comm.moe_combine(res.handle, y)
            res.handle.close()
            return
        outcome = {}
        in_call = threading.Event()

        def run():
            try:
                outcome["out"] = comm.moe_combine(res.handle, y)
            except Exception as exc:  # noqa: BLE001 - reported below
                outcome["error"] = exc

        with library_hook("weft_moe_combine", lambda *args: in_call.set()):
            th = threading.Thread(target=run)
            th.start()
            ctx.expect(in_call.wait(30), "the combine thread never called the library")
            res.handle.close()  # the thread's combine holds the handle, waiting for the peers
            ctx.expect(res.handle.closed, "handle.closed is False after close()")
            if n > 1:  # alone, rank 0's combine waits for nobody and may be over
                ctx.expect(res.handle._handle is not None,
                           "close() freed the handle while a combine was using it")
            side.barrier()  # the peers may join the combine now
            th.join()
        ctx.expect(res.handle._handle is None, "the handle was not freed when its last use ended")
    ctx.expect("error" not in outcome, f"combine during close() failed: {outcome.get('error')}")
    if "out" in outcome:
        ctx.expect_values(outcome["out"], k.values(want),
                          "combine during close() against the one before")
    ctx.expect_raises(ValueError, lambda: comm.moe_combine(res.handle, y),
                      "moe_combine after close()", contains="closed")


@case("registered_memory", kinds=("numpy", "torch-cuda-pool"))
def case_registered_memory(ctx, _):
    """Collectives on weft memory (and on interior views of it) are zero-copy; on other memory
    they are staged. Payloads are past the paths that read no user buffer remotely (host inline,
    CUDA push: PAST_PUSH_COUNT)."""
    k, comm, n = ctx.kind, ctx.comm, ctx.n
    count = PAST_PUSH_COUNT
    big = k.weft_empty(comm, (3 * count,), "float32")
    vals = [gen_values(ctx.rng(r), count, "float32", "sum") for r in range(n)]
    view = big[count:2 * count]  # interior: neither the start nor the end of the allocation
    k.copy_into(view, k.array(vals[ctx.rank], "float32"))
    k.sync()
    time.sleep(0.05)  # registration completes in the background
    before = comm.stats()
    comm.all_reduce(view)
    k.sync()
    after = comm.stats()
    ctx.expect_values(view, np.stack(vals).sum(axis=0), "all_reduce on an interior view")
    if n > 1:
        ctx.expect(after["zero_copy_ops"] == before["zero_copy_ops"] + 1,
                   f"zero_copy_ops {before['zero_copy_ops']} -> {after['zero_copy_ops']}")
        ctx.expect(after["staged_ops"] == before["staged_ops"],
                   f"staged_ops {before['staged_ops']} -> {after['staged_ops']}")
    plain = k.plain_array(vals[ctx.rank], "float32")
    comm.all_reduce(plain)
    k.sync()
    later = comm.stats()
    if n > 1:
        ctx.expect(later["staged_ops"] == after["staged_ops"] + 1,
                   f"staged_ops on plain memory {after['staged_ops']} -> {later['staged_ops']}")


@case("errors")
def case_errors(ctx, _):
    """Bad arguments raise before anything is sent, and the communicator stays usable."""
    k, comm, n = ctx.kind, ctx.comm, ctx.n
    f32 = k.array(np.zeros(8), "float32")
    i32 = k.array(np.zeros(8), "int32")
    ctx.expect_raises(TypeError, lambda: comm.all_reduce([1.0, 2.0]), "a list",
                      "numpy.ndarray or a torch.Tensor")
    ctx.expect_raises(TypeError, lambda: comm.all_reduce(np.zeros(4, np.bool_)), "bool dtype",
                      "does not support")
    ctx.expect_raises(TypeError, lambda: comm.all_reduce(np.zeros(4, np.int16)), "int16 dtype",
                      "does not support")
    ctx.expect_raises(TypeError, lambda: comm.all_reduce(np.zeros(4, np.complex64)),
                      "complex dtype", "does not support")
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(f32, "xor"), "op 'xor'", "'sum'")
    ctx.expect_raises(TypeError, lambda: comm.all_gather_into_tensor(
        k.empty((8 * n,), "int32"), f32), "mixed dtypes", "must be equal")
    ctx.expect_raises(ValueError, lambda: comm.all_gather_into_tensor(
        k.empty((8 * n + 1,), "float32"), f32), "all_gather size", "expected")
    ctx.expect_raises(ValueError, lambda: comm.reduce_scatter_tensor(
        k.empty((9,), "float32"), k.empty((8 * n,), "float32")), "reduce_scatter size",
        "expected")
    ctx.expect_raises(ValueError, lambda: comm.broadcast(f32, n), "root out of range",
                      "not a rank")
    ctx.expect_raises(TypeError, lambda: comm.broadcast(f32, 0.5), "root not an int",
                      "must be an int")
    two_d = k.empty((4, 6), "float32")
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(two_d[:, :3]), "non-contiguous",
                      "contiguous")
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(two_d.T), "transposed",
                      "contiguous")
    if n > 1:
        ctx.expect_raises(ValueError, lambda: comm.all_to_all_single(
            k.empty((n + 1, 2), "float32"), k.empty((n + 1, 2), "float32")),
            "uneven rows without splits", "divisible")
    ctx.expect_raises(ValueError, lambda: comm.all_to_all_single(
        k.empty((n, 2), "float32"), k.empty((n, 2), "float32"), [1] * n, [1] * (n + 1)),
        "split sizes of the wrong length", "one per rank")
    ctx.expect_raises(ValueError, lambda: comm.all_to_all_single(
        k.empty((n, 2), "float32"), k.empty((n, 2), "float32"), [1] * n, [2] * n),
        "split sizes of the wrong sum", "sums to")
    ctx.expect_raises(ValueError, lambda: comm.all_to_all_single(
        k.empty((n, 2), "float32"), k.empty((n, 3), "float32")), "row shapes differ",
        "shape[1:]")
    x = k.array(np.zeros((2, 4)), "float32")
    idx = k.array(np.zeros((2, 1)), "int64")
    w = k.array(np.zeros((2, 1)), "float32")
    ctx.expect_raises(TypeError, lambda: comm.moe_dispatch(k.array(np.zeros((2, 4)), "int32"),
                                                           idx, w, n), "moe int x", "float32")
    ctx.expect_raises(TypeError, lambda: comm.moe_dispatch(x, i32[:2].reshape(2, 1), w, n),
                      "moe int32 topk_idx", "int64")
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(x, idx, w, n + 1 if n > 1 else 0),
                      "moe num_experts", "multiple")
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(
        x, k.array(np.full((2, 1), n), "int64"), w, n), "moe expert out of range", "outside")
    # Past a C int: a multiple of n whose low 32 bits are n (ctypes would pass n); a topk of
    # 2**31 on no tokens.
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(x, idx, w, n * (2**32 + 1)),
                      "moe num_experts past a C int",
                      f"num_experts {n * (2**32 + 1)} is outside the range of a C int")
    wide = k.array(np.zeros((0, 2**31)), "int64")
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(
        x[:0], wide, k.array(np.zeros((0, 2**31)), "float32"), n * 2**31),
        "moe topk past a C int", "topk 2147483648 is outside the range of a C int")
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(x, idx, k.array(np.zeros((2, 2)),
                                                                            "float32"), n),
                      "moe weights shape", "must be equal")
    if k.name == "numpy":
        ro = np.zeros(8, np.float32)
        ro.flags.writeable = False
        ctx.expect_raises(ValueError, lambda: comm.all_reduce(ro), "read-only", "read-only")
    # Caught by the C library (overlapping buffers): WeftError with weft_last_error()'s text.
    if n > 1:
        buf = k.empty((8 * n,), "float32")
        err = ctx.expect_raises(weft.WeftError, lambda: comm.all_gather_into_tensor(
            buf, buf[1:9]), "overlapping all_gather", "weft_all_gather")
        if err is not None:
            ctx.expect(err.status == "WEFT_ERR_INVALID_ARGUMENT", f"status {err.status}")
            ctx.expect("overlaps" in err.message, f"message {err.message!r}")
            ctx.expect(str(err).startswith("WEFT_ERR_INVALID_ARGUMENT: "), f"str {err}")
    # Still usable.
    t = k.array(np.full(8, ctx.rank + 1), "int32")
    comm.all_reduce(t)
    k.sync()
    ctx.expect_values(t, np.full(8, n * (n + 1) // 2), "all_reduce after the errors")


@case("gil", kinds=("numpy", "torch-cpu"))
def case_gil(ctx, _):
    """A rank blocked in a collective does not hold the GIL: another thread keeps running."""
    comm = ctx.comm
    t = ctx.kind.array(np.ones(1000), "float64")
    if ctx.rank == 0:
        time.sleep(0.3)
        comm.all_reduce(t)
    else:
        done = threading.Event()
        errors = []

        def run():
            try:
                comm.all_reduce(t)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            done.set()

        th = threading.Thread(target=run)
        th.start()
        time.sleep(0.02)  # let the thread enter the C call
        spins = 0
        while not done.is_set():
            spins += 1
        th.join()
        ctx.expect(not errors, f"all_reduce in a thread failed: {errors}")
        ctx.expect(spins > 10000, f"the main thread ran only {spins} loop iterations while "
                                  "the collective waited: the GIL was held")
    ctx.expect_values(t, np.full(1000, float(ctx.n)), "all_reduce of ones")


@case("module_functions")
def case_module_functions(ctx, _):
    """weft.<collective> runs on the default communicator (the one weft.init() made)."""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    ctx.expect(weft.default_comm() is comm, "weft.default_comm() is not the communicator")
    t = k.array(np.full(300, me + 1), "int64")
    weft.all_reduce(t, weft.ReduceOp.MAX)
    k.sync()
    ctx.expect_values(t, np.full(300, n), "weft.all_reduce MAX")
    # torch.distributed's trailing arguments: group=None, async_op=True gives a Work.
    work = weft.all_reduce(t, weft.ReduceOp.SUM, None, True)
    ctx.expect(isinstance(work, weft.Work) and work.wait() is True, f"async_op gave {work!r}")
    k.sync()
    ctx.expect_values(t, np.full(300, n * n), "weft.all_reduce SUM with async_op=True")
    ctx.expect_raises(ValueError, lambda: weft.barrier(group="world"), "barrier with a group",
                      contains="group")
    out = k.empty((n * 2,), "int32")
    weft.all_gather_into_tensor(out, k.array(np.array([me, -me]), "int32"))
    k.sync()
    ctx.expect_values(out, np.array([[r, -r] for r in range(n)]).reshape(-1),
                      "weft.all_gather_into_tensor")
    rs = k.empty((2,), "float32")
    weft.reduce_scatter_tensor(rs, k.array(np.arange(2 * n), "float32"), op="sum")
    k.sync()
    ctx.expect_values(rs, np.arange(2 * me, 2 * me + 2) * n, "weft.reduce_scatter_tensor")
    b = k.array(np.full(5, me), "uint8")
    weft.broadcast(b, n - 1)
    k.sync()
    ctx.expect_values(b, np.full(5, n - 1), "weft.broadcast")
    a = k.empty((n,), "int64")
    weft.all_to_all_single(a, k.array(np.arange(n) + 10 * me, "int64"))
    k.sync()
    ctx.expect_values(a, np.arange(n) * 10 + me, "weft.all_to_all_single")
    weft.barrier()
    st = comm.stats()
    ctx.expect(set(st) >= {"zero_copy_ops", "staged_ops", "first_use_waits",
                           "first_use_wait_ns", "registrations_started", "inline_ops",
                           "copy_engine_ops", "sm_blocks"},
               f"stats keys {sorted(st)}")
    ctx.expect(all(isinstance(v, int) and v >= 0 for v in st.values()), f"stats {st}")
    if comm.backend == "host":  # no SM, no copy engine
        ctx.expect(st["sm_blocks"] == 0 and st["copy_engine_ops"] == 0, f"host stats {st}")
    else:  # the collectives above moved data on the SMs
        ctx.expect(st["sm_blocks"] > 0, f"CUDA stats {st}")


@case("edges", kinds=("numpy",))
def case_edges(ctx, _):
    """A read-only array on the broadcast root; all_to_all_single whose output has no elements
    (and so no checked row shape) refuses before writing past it; a MoE handle still open when
    its communicator is destroyed is closed by destroy()."""
    k, comm, n, me = ctx.kind, ctx.comm, ctx.n, ctx.rank
    root = n - 1
    vals = np.arange(7, dtype=np.int32) + 100
    t = vals.copy() if me == root else np.zeros(7, np.int32)
    if me == root:
        t.flags.writeable = False
    comm.broadcast(t, root)
    ctx.expect_values(t, vals, "broadcast from a read-only root array")

    backing = np.full(4 + 3 * n, -1.0, np.float32)
    out = backing[4:4].reshape(n, 0)
    inp = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
    ctx.expect_raises(weft.WeftError,
                      lambda: comm.all_to_all_single(out, inp, [1] * n, [1] * n),
                      "all_to_all_single into a 0-element output")
    ctx.expect((backing == -1.0).all(), f"all_to_all_single wrote past its output: {backing}")

    with weft.init() as c2:
        x = np.ones((2, 4), np.float32)
        idx = np.zeros((2, 1), np.int64)
        res = c2.moe_dispatch(x, idx, np.ones((2, 1), np.float32), n)
        handle = res.handle
    ctx.expect(handle._handle is None, "destroy() left a MoE handle open")
    handle.close()  # after its communicator: nothing to free, no error


@case("unaligned", kinds=("numpy",))
def case_unaligned(ctx, _):
    """Arrays not aligned to their elements, which the library refuses to reduce and to take in
    MoE calls, are refused in Python (ValueError) before the C call; the calls that copy bytes
    (all_gather) take them."""
    comm, n, me = ctx.comm, ctx.n, ctx.rank

    def unaligned(count, dtype=np.float32):
        raw = np.zeros(count * np.dtype(dtype).itemsize + 1, np.uint8)
        return np.ndarray((count,), dtype, raw.data, offset=1)

    una = unaligned(8)
    ctx.expect(not una.flags.aligned, "test setup: the array is aligned")
    ctx.expect_raises(ValueError, lambda: comm.all_reduce(una), "all_reduce unaligned",
                      "aligned")
    ctx.expect_raises(ValueError, lambda: comm.reduce_scatter_tensor(
        np.zeros(2, np.float32), unaligned(2 * n)), "reduce_scatter unaligned input", "aligned")
    ctx.expect_raises(ValueError, lambda: comm.reduce_scatter_tensor(
        unaligned(2), np.zeros(2 * n, np.float32)), "reduce_scatter unaligned output", "aligned")
    x = unaligned(8).reshape(2, 4)
    idx = np.zeros((2, 1), np.int64)
    w = np.ones((2, 1), np.float32)
    ctx.expect_raises(ValueError, lambda: comm.moe_dispatch(x, idx, w, n), "moe x unaligned",
                      "aligned")
    res = comm.moe_dispatch(np.ones((2, 4), np.float32), idx, w, n)
    y = unaligned(res.num_recv_tokens * 4).reshape(res.num_recv_tokens, 4)
    if res.num_recv_tokens:
        ctx.expect_raises(ValueError, lambda: comm.moe_combine(res.handle, y), "moe y unaligned",
                          "aligned")
    res.handle.close()
    src = unaligned(3)
    src[:] = [me, me + 1, me + 2]
    out = np.zeros(3 * n, np.float32)
    comm.all_gather_into_tensor(out, src)
    ctx.expect_values(out, np.array([[r, r + 1, r + 2] for r in range(n)]).reshape(-1),
                      "all_gather of an unaligned input")
    t = np.full(8, me + 1, np.int32)
    comm.all_reduce(t)
    ctx.expect_values(t, np.full(8, n * (n + 1) // 2), "all_reduce after the refusals")


KINDS = ("numpy", "torch-cpu", "torch-cuda", "torch-cuda-pool", "torch-cuda-global",
         "torch-cuda-hostcomm")


def case_names(kind):
    """The cases that run for kind, in order (dtypes a kind lacks are left out). Cases
    registered without kinds run for every kind but torch-cuda-hostcomm."""
    dtypes = NumpyKind.dtypes if kind == "numpy" else TorchKind.dtypes
    names = []
    for name, _, arg, kinds in CASES:
        if kinds is None and kind == "torch-cuda-hostcomm":
            continue
        if kinds is not None and kind not in kinds:
            continue
        if arg is not None and arg in ALL_DTYPES and arg not in dtypes:
            continue
        names.append(name)
    return names


def make_kind(kind, comm):
    if kind == "numpy":
        return NumpyKind()
    if kind == "torch-cpu":
        return TorchKind(kind, "cpu")
    import torch

    import weft.torch

    if kind == "torch-cuda-hostcomm":
        return TorchKind(kind, "cuda")
    if kind == "torch-cuda-global":
        # Before anything initialises PyTorch's CUDA state (set_device does).
        weft.torch.use_weft_allocator(comm)
    torch.cuda.set_device(comm.device)
    if kind == "torch-cuda-pool":
        return TorchKind(kind, "cuda", pool=weft.torch.mem_pool(comm))
    return TorchKind(kind, "cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--kind", default="numpy", choices=KINDS)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    if args.kind.startswith("torch-cuda"):
        importlib.import_module("cases_gpu")  # registers the GPU cases

    comm = weft.init()
    kind = make_kind(args.kind, comm)
    wanted = set(args.cases.split(",")) if args.cases else None
    allowed = set(case_names(args.kind))
    results = {}
    # One write per line: the ranks share stdout.
    sys.stdout.write(f"worker rank {comm.rank}/{comm.size} kind {args.kind} seed {args.seed}\n")
    for name, fn, arg, _ in CASES:
        if name not in allowed or (wanted is not None and name not in wanted):
            continue
        ctx = Ctx(comm, kind, args.seed, zlib.crc32(name.encode()))
        try:
            fn(ctx, arg)
        except Exception:  # noqa: BLE001 - recorded as the case's failure
            ctx.failures.append("exception: " + traceback.format_exc().strip()[-1500:])
        results[name] = "ok" if not ctx.failures else "FAIL: " + "; ".join(ctx.failures)
        if ctx.failures:
            sys.stdout.write(f"rank {comm.rank}: {name}: {results[name]}\n")
    kind = None
    comm.destroy()
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as f:
        json.dump({"seed": args.seed, "rank": comm.rank, "size": comm.size, "kind": args.kind,
                   "results": results}, f)
    return 0


if __name__ == "__main__":
    # Run as the module "worker", the one cases_gpu registers its cases in.
    import worker

    sys.exit(worker.main())
