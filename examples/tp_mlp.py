"""A tensor-parallel MLP block with weft, checked against the same block on one rank and timed
against torch.distributed.

    weftrun -n 4 python examples/tp_mlp.py                  # CPU tensors, host backend
    WEFT_BACKEND=cuda weftrun -n 4 python examples/tp_mlp.py  # CUDA tensors (MPS on one GPU)

The block is y = gelu(x W1 + b1) W2 + b2 (x: tokens x hidden, W1: hidden x ffn, W2: ffn x
hidden), split Megatron-style over n ranks: rank r holds columns [r ffn/n, (r+1) ffn/n) of W1
and b1 (column-parallel linear) and the same rows of W2 (row-parallel linear). Forward, each
rank computes its slice of the hidden activation and a partial output; one all-reduce sums the
partial outputs, then b2 is added. Backward mirrors it: the gradient of x is a sum of partial
gradients, one all-reduce again. Both all-reduces are autograd functions.

Every rank builds the whole block from the same seed, runs it alone as the reference, and
checks its own outputs and gradients (its shards of dW1, db1, dW2; dx; db2) against the
reference's. Each rank prints "PASS tp_mlp rank=R" or "FAIL tp_mlp rank=R: ..." and exits
non-zero on a failure.

Then the training step (forward and backward) is timed with weft's all-reduce and with
torch.distributed's (gloo on the CPU; NCCL on CUDA when every rank has a GPU of its own,
otherwise that comparison is skipped with a message). On CUDA the model and its activations
live in a weft.torch.mem_pool, so every all-reduce is zero-copy; comm.stats() shows it.
"""

import argparse
import contextlib
import hashlib
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import weft

# -- the two communication points of tensor parallelism ------------------------------------------


class _CopyToParallel(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient backward (the input x is used by every
    rank's column shard, so its gradient is the sum of the ranks' partial gradients)."""

    @staticmethod
    def forward(ctx, x, reduce):
        ctx.reduce = reduce
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        ctx.reduce(grad)
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """All-reduce forward (sum of the partial outputs of the row-parallel linear); identity
    backward (every rank gets the whole output gradient)."""

    @staticmethod
    def forward(ctx, partial, reduce):
        out = partial.contiguous()
        reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ParallelMLP(torch.nn.Module):
    """This rank's part of the block. reduce(t) sums t over the ranks, in place."""

    def __init__(self, w1, b1, w2, b2, rank, nranks, reduce):
        super().__init__()
        ffn = w1.shape[1]
        lo, hi = rank * ffn // nranks, (rank + 1) * ffn // nranks
        self.w1 = torch.nn.Parameter(w1[:, lo:hi].clone())
        self.b1 = torch.nn.Parameter(b1[lo:hi].clone())
        self.w2 = torch.nn.Parameter(w2[lo:hi, :].clone())
        self.b2 = torch.nn.Parameter(b2.clone())
        self.reduce = reduce

    def forward(self, x):
        x = _CopyToParallel.apply(x, self.reduce)
        h = F.gelu(x @ self.w1 + self.b1)
        y = _ReduceFromParallel.apply(h @ self.w2, self.reduce)
        return y + self.b2


def reference(w1, b1, w2, b2, x, dy):
    """The whole block on one rank: output and gradients."""
    params = [t.clone().requires_grad_(True) for t in (w1, b1, w2, b2)]
    xr = x.clone().requires_grad_(True)
    y = F.gelu(xr @ params[0] + params[1]) @ params[2] + params[3]
    y.backward(dy)
    return y.detach(), xr.grad, [p.grad for p in params]


def make_block(args, device, dtype):
    """Weights, input and output gradient, identical on every rank (one seed)."""
    g = torch.Generator().manual_seed(args.seed)
    h, f, t = args.hidden, args.ffn, args.tokens

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    w1 = randn(h, f, scale=h**-0.5)
    b1 = randn(f, scale=0.1)
    w2 = randn(f, h, scale=f**-0.5)
    b2 = randn(h, scale=0.1)
    x = randn(t, h)
    dy = randn(t, h)
    return w1, b1, w2, b2, x, dy


def run_step(model, x, dy):
    for p in model.parameters():
        p.grad = None
    xg = x.clone().requires_grad_(True)
    y = model(xg)
    y.backward(dy)
    return y.detach(), xg.grad


def check(model, x, dy, ref, rank, nranks, ffn, label):
    """Compare this rank's outputs and gradients with the reference; return failure texts."""
    y_ref, dx_ref, (dw1, db1, dw2, db2) = ref
    y, dx = run_step(model, x, dy)
    lo, hi = rank * ffn // nranks, (rank + 1) * ffn // nranks
    pairs = [
        ("y", y, y_ref),
        ("dx", dx, dx_ref),
        ("dW1 shard", model.w1.grad, dw1[:, lo:hi]),
        ("db1 shard", model.b1.grad, db1[lo:hi]),
        ("dW2 shard", model.w2.grad, dw2[lo:hi, :]),
        ("db2", model.b2.grad, db2),
    ]
    failures = []
    for name, got, want in pairs:
        try:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        except AssertionError as exc:
            failures.append(f"{label} {name}: {str(exc).splitlines()[0]}")
    return failures


def time_steps(model, x, dy, iters, sync):
    for _ in range(3):
        run_step(model, x, dy)
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        run_step(model, x, dy)
    sync()
    return (time.perf_counter() - t0) / iters


def init_torch_distributed(comm, device):
    """(torch.distributed, its backend's name) with a process group beside weft's communicator,
    or (None, why not)."""
    # The rendezvous is a FileStore named after weftrun's per-job secret: it needs no port, and
    # runs alike under weftrun (whose MASTER_PORT is another port than weft's store) and torchrun.
    import torch.distributed as dist

    if device.type == "cuda":
        if torch.cuda.device_count() < comm.size:
            return None, (f"NCCL needs a GPU per rank ({comm.size} ranks, "
                          f"{torch.cuda.device_count()} GPUs): torch.distributed comparison "
                          "skipped")
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend, store=dist.FileStore(_store_path(), comm.size),
                            rank=comm.rank, world_size=comm.size)
    return dist, backend


def _store_path():
    job = os.environ.get("WEFT_JOB_SECRET") or os.environ.get("MASTER_PORT", "0")
    name = "weft-tp-mlp-" + hashlib.sha256(job.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), name)


def say(line):
    """Print one line in one write: the ranks share stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    comm = weft.init()
    rank, n = comm.rank, comm.size
    if args.ffn % n:
        print(f"tp_mlp: --ffn {args.ffn} must be a multiple of the rank count {n}",
              file=sys.stderr)
        comm.destroy()
        return 2
    pool = None
    if comm.backend == "cuda":
        from weft import torch as weft_torch

        torch.cuda.set_device(comm.device)
        torch.backends.cuda.matmul.allow_tf32 = False
        device = torch.device("cuda", comm.device)
        pool = weft_torch.mem_pool(comm)

        def sync():
            torch.cuda.synchronize()
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # the ranks share the host's cores

        def sync():
            pass

    def in_pool():
        return torch.cuda.use_mem_pool(pool) if pool is not None else contextlib.nullcontext()

    dtype = torch.float32
    with in_pool():
        w1, b1, w2, b2, x, dy = make_block(args, device, dtype)
        ref = reference(w1, b1, w2, b2, x, dy)
        model = ParallelMLP(w1, b1, w2, b2, rank, n, comm.all_reduce)
        before = comm.stats()
        failures = check(model, x, dy, ref, rank, n, args.ffn, "weft")
        sync()
        after = comm.stats()
        t_weft = time_steps(model, x, dy, args.iters, sync)

    dist, dist_note = init_torch_distributed(comm, device)
    t_dist = None
    if dist is not None:
        def dist_reduce(t):
            dist.all_reduce(t)

        model_d = ParallelMLP(w1, b1, w2, b2, rank, n, dist_reduce)
        failures += check(model_d, x, dy, ref, rank, n, args.ffn,
                          f"torch.distributed/{dist_note}")
        t_dist = time_steps(model_d, x, dy, args.iters, sync)

    if failures:
        say(f"FAIL tp_mlp rank={rank}: " + "; ".join(failures))
    else:
        say(f"PASS tp_mlp rank={rank}")
    if rank == 0:
        zc = after["zero_copy_ops"] - before["zero_copy_ops"]
        st = after["staged_ops"] - before["staged_ops"]
        say(f"tp_mlp: {n} ranks, {device.type}, tokens {args.tokens}, hidden {args.hidden}, "
              f"ffn {args.ffn}; one checked step: {zc} zero-copy and {st} staged all-reduces")
        say(f"tp_mlp: step (forward + backward) with weft: {t_weft * 1e3:.3f} ms")
        if t_dist is not None:
            say(f"tp_mlp: step with torch.distributed ({dist_note}): {t_dist * 1e3:.3f} ms "
                  f"(weft / torch.distributed = {t_weft / t_dist:.2f})")
        else:
            say(f"tp_mlp: {dist_note}")
    if dist is not None:
        dist.destroy_process_group()
        comm.barrier()
        if rank == 0 and os.path.exists(_store_path()):
            os.remove(_store_path())
    # The pool's memory goes with the communicator: drop every tensor in it, then the pool
    # (PyTorch hands its segments back through weft_torch_free), then the communicator.
    del model, ref, w1, b1, w2, b2, x, dy
    sync()
    pool = None
    comm.destroy()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
