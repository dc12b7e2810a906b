"""weft: collective communication for scale-up domains, from Python.

    import weft
    with weft.init() as comm:            # under `weftrun -n 4 python script.py` or torchrun
        weft.all_reduce(t)               # numpy array / CPU tensor (host backend), or a CUDA
                                         # tensor (CUDA backend, on the current stream)

The module-level collectives mirror torch.distributed's names, arguments (group must be None;
async_op=True returns a Work) and semantics, and run on the first communicator weft.init() made
(or on comm=). weft.torch gives PyTorch a weft-backed
allocator, so that tensors are registered at allocation and collectives on them are
zero-copy. The C library is reached through ctypes (docs/python.md says why).
"""

from ._comm import Comm, MoeDispatchResult, MoeHandle, ReduceOp, default_comm, init
from ._lib import WeftError, launcher_path, library_path

__version__ = "0.1.0"

__all__ = [
    "Comm",
    "MoeDispatchResult",
    "MoeHandle",
    "ReduceOp",
    "WeftError",
    "Work",
    "all_gather_into_tensor",
    "all_reduce",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "default_comm",
    "init",
    "launcher_path",
    "library_path",
    "moe_combine",
    "moe_dispatch",
    "reduce_scatter_tensor",
]


class Work:
    """What a collective called with async_op=True returns, as torch.distributed's do. The call
    has already run (host backend) or is queued on the current stream (CUDA backend), ahead of
    whatever the caller queues next, so wait() has nothing to wait for."""

    def wait(self, timeout=None):
        return True


def _no_group(call, group):
    """torch.distributed's group argument: a weft communicator spans every rank (pass comm= to
    use another one), so only None is taken."""
    if group is not None:
        raise ValueError(f"{call}: group {group!r} is not supported; weft collectives span every "
                         "rank of a communicator (pass comm=)")


def _done(async_op, result):
    """torch.distributed's async_op: a Work, else the call's result."""
    return Work() if async_op else result


def all_reduce(tensor, op="sum", group=None, async_op=False, *, comm=None):
    """Comm.all_reduce on comm or the default communicator."""
    _no_group("all_reduce", group)
    return _done(async_op, default_comm(comm).all_reduce(tensor, op))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False, *,
                           comm=None):
    """Comm.all_gather_into_tensor on comm or the default communicator."""
    _no_group("all_gather_into_tensor", group)
    out = default_comm(comm).all_gather_into_tensor(output_tensor, input_tensor)
    return _done(async_op, out)


def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False, *, comm=None):
    """Comm.reduce_scatter_tensor on comm or the default communicator."""
    _no_group("reduce_scatter_tensor", group)
    out = default_comm(comm).reduce_scatter_tensor(output, input, op)
    return _done(async_op, out)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False, *, comm=None):
    """Comm.all_to_all_single on comm or the default communicator."""
    _no_group("all_to_all_single", group)
    out = default_comm(comm).all_to_all_single(output, input, output_split_sizes,
                                               input_split_sizes)
    return _done(async_op, out)


def broadcast(tensor, src, group=None, async_op=False, *, comm=None):
    """Comm.broadcast on comm or the default communicator."""
    _no_group("broadcast", group)
    return _done(async_op, default_comm(comm).broadcast(tensor, src))


def barrier(group=None, async_op=False, *, comm=None):
    """Comm.barrier on comm or the default communicator."""
    _no_group("barrier", group)
    return _done(async_op, default_comm(comm).barrier())


def moe_dispatch(x, topk_idx=None, topk_weights=None, num_experts=None, *, handle=None,
                 comm=None):
    """Comm.moe_dispatch on comm or the default communicator."""
    return default_comm(comm).moe_dispatch(x, topk_idx, topk_weights, num_experts, handle=handle)


def moe_combine(handle, y, out=None, *, comm=None):
    """Comm.moe_combine on comm or the default communicator."""
    return default_comm(comm).moe_combine(handle, y, out)
