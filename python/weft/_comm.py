"""The communicator and its collectives.

Each method checks its arguments in Python (types, dtypes, sizes, contiguity, device against
backend; see _buffers.py), then makes one C call. On the host backend the call returns when the
operation is complete; on the CUDA backend it is queued on torch's current CUDA stream (and can
be captured in a CUDA graph). ctypes releases the GIL during the call.

Thread safety: as in C, one thread at a time uses a communicator; a lock per communicator makes
concurrent Python callers wait for each other instead of corrupting the C state. abort() does not
take that lock: it is meant to be called while another thread is blocked in an operation, or in
destroy().
"""

import contextlib
import ctypes
import enum
import threading
import warnings
import weakref

import numpy as np

from . import _buffers as B
from ._lib import STATS_FIELDS, WeftError, _Config, _Stats, check, library, status_error

MOE_REUSE = 0  # WEFT_MOE_REUSE (weft.h): the topk of a dispatch reusing a handle's layout

_BACKENDS = {"auto": 0, "host": 1, "cuda": 2}
_REGISTRATIONS = {"roa": 0, "jit": 1, "staged": 2}
_TIMEOUT_S_RANGE = (1e-3, 1e7)  # WEFT_TIMEOUT_S_MIN and _MAX of src/util/config.h
_C_INT_BITS = 8 * ctypes.sizeof(ctypes.c_int)
_C_INT_RANGE = (-(1 << (_C_INT_BITS - 1)), (1 << (_C_INT_BITS - 1)) - 1)


class ReduceOp(enum.IntEnum):
    """Reductions (weft_redop_t). Functions also take their names as strings ("sum", ...) and
    torch.distributed.ReduceOp values of the same names."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


_OP_ALIASES = {"product": "prod", "mean": "avg"}


def _redop(call, op):
    if isinstance(op, ReduceOp):
        return int(op)
    name = op if isinstance(op, str) else getattr(op, "name", None)
    if isinstance(name, str):
        key = name.lower()
        key = _OP_ALIASES.get(key, key)
        if key.upper() in ReduceOp.__members__:
            return int(ReduceOp[key.upper()])
    raise ValueError(f"{call}: op {op!r} is not one of 'sum', 'prod', 'min', 'max', 'avg'")


class _Allocation:
    """Memory from weft_malloc exposed to numpy (__array_interface__); freed when the last array
    viewing it goes away, unless the communicator was destroyed first (which freed it)."""

    def __init__(self, comm, ptr, shape, dtype):
        self._comm = comm
        self._ptr = ptr
        comm._allocations.add(self)  # counted by destroy()
        self._free = library().weft_free  # no module lookups in __del__ at interpreter exit
        self.__array_interface__ = {
            "data": (ptr, False),
            "shape": tuple(shape),
            "typestr": dtype.str,
            "version": 3,
        }

    def __del__(self):
        # A finalizer must not block on a lock: the collector may run it on a thread that holds
        # another communicator's _state_lock while a thread holding this one's finalizes an
        # allocation of that other (a deadlock). So it only tries the lock (re-entrant: free at
        # once when this thread holds it); when another thread holds it, the pointer is queued
        # for the communicator's next call that takes the lock (_free_doomed_allocations).
        comm = self._comm
        lock = comm._state_lock
        if not lock.acquire(blocking=False):
            comm._doomed_allocations.append(self._ptr)  # list.append: atomic, takes no lock
            return
        try:
            handle = comm._handle
            if handle is not None:
                self._free(handle, self._ptr)
        finally:
            lock.release()


class MoeHandle:
    """The layout of one moe_dispatch, for moe_combine (any number of times). Freed by close(),
    or after it is garbage-collected (see __del__)."""

    def __init__(self, comm, handle, x, num_recv_tokens):
        # An empty array or tensor of x's kind, dtype and device (not x: that would keep it
        # alive), for checking y and allocating combine's output. Made first: nothing below
        # can fail, so an exception here leaves the C handle to the caller.
        self._x = B.as_buffer("moe_dispatch", "x", B.empty_like_kind(x, (0, x.shape[1]), "same"))
        self.num_tokens = x.shape[0]
        self.hidden = x.shape[1]
        self.num_recv_tokens = num_recv_tokens
        self._comm = comm
        self._lib = comm._lib  # no lookups (library() takes a lock) in __del__
        self._uses = 0  # calls using the handle now (_pinned); close() leaves it to the last
        self._closing = False
        # The C handle, in a one-element list that whoever destroys it empties with pop()
        # (atomic under the GIL): close(), the end of the last call using it, comm.destroy()
        # and __del__ may race (a finalizer runs on any thread, and CPython runs it before it
        # clears the weak references through which destroy() finds the handle), and exactly
        # one of them must get it.
        self._cell = [handle]
        comm._moe_handles.add(self)  # closed by comm.destroy() if still open

    @property
    def _handle(self):
        """The C handle, None once taken for destroying."""
        cell = getattr(self, "_cell", None)
        return cell[0] if cell else None

    def _take(self):
        """The C handle, removed from the cell (None if another path took it)."""
        try:
            return self._cell.pop()
        except (AttributeError, IndexError):
            return None

    def close(self):
        """Free the layout; idempotent. A combine or dispatch using the handle on another thread
        keeps it until that call returns, and later calls raise ValueError. On the CUDA backend
        it waits for the device (weft_moe_handle_destroy). Also frees the handles of the
        communicator garbage-collected before (Comm.free_moe_handles)."""
        with self._comm._state_lock:
            self._closing = True
            handle = self._detach()
        _destroy_moe_handle(handle)
        self._comm.free_moe_handles()

    @property
    def closed(self):
        """Whether close() was called (by the user, or by the communicator's destroy())."""
        return self._closing

    def _detach(self):
        """Under the communicator's _state_lock: take the C handle for destroying, unless a call
        uses it (the last one takes it when it returns) or it was taken already (None)."""
        if self._uses:
            return None
        return self._take()

    @contextlib.contextmanager
    def _pinned(self, call):
        """The C handle, kept from close() for the span of one call."""
        with self._comm._state_lock:
            if self._closing:
                raise ValueError(f"{call}: handle was closed")
            self._uses += 1
        try:
            yield self._handle
        finally:
            with self._comm._state_lock:
                self._uses -= 1
                handle = self._detach() if self._closing else None
            _destroy_moe_handle(handle)

    def __del__(self):
        # A finalizer runs wherever the last reference goes: inside a lock, on any thread,
        # during CUDA-graph capture (where waiting for the device, as weft_moe_handle_destroy
        # does on CUDA for a handle still attached to its communicator, is not allowed). So it
        # takes no lock and never waits: the C handle joins the communicator's queue (Comm.
        # _doomed), which an explicit call drains (Comm.free_moe_handles; on the host backend
        # also each operation). No call uses the handle here (a call keeps it alive).
        handle = self._take()
        if handle is None:
            return  # taken by close(), a call's end or comm.destroy(), or never set
        comm = self._comm
        comm._doomed.append(handle)  # list.append: atomic, takes no lock
        # Checked after the append: once weft_comm_destroy has returned (_abortable None) the
        # communicator's destroy() drains the queue no more, and its handles are detached
        # (destroying one frees host memory only, never waits: weft.h), so drain it here. A
        # destroy() that marks the communicator gone after this check drains it itself.
        if comm._abortable is None:
            comm._drain_doomed()


def _destroy_moe_handle(handle):
    """weft_moe_handle_destroy (None: nothing), outside every lock of the communicator: on the
    CUDA backend it waits for the device. Also after the communicator's destroy(): the library
    detaches a communicator's handles when it destroys it, and a handle's host memory is freed
    only here."""
    if handle is not None:
        library().weft_moe_handle_destroy(handle)


class MoeDispatchResult:
    """What moe_dispatch returns: recv_x (num_recv_tokens x hidden, x's dtype), recv_topk_idx
    (int64) and recv_topk_weights (float32), both num_recv_tokens x topk, recv_expert_counts
    (int64, num_experts / size), num_recv_tokens (int) and handle (a MoeHandle for
    moe_combine). The arrays are of x's kind (numpy, or torch on x's device).

    num_recv_tokens_written is the one-element int64 array (or tensor) into which the library
    wrote weft_moe_dispatch's *num_recv_tokens. On the host backend moe_dispatch has compared it
    with num_recv_tokens already (and raised WeftError on a difference). On the CUDA backend
    it is written on the stream: read it after synchronising; it equals num_recv_tokens, or is
    -1 where the device rejected the dispatch (weft.h)."""

    __slots__ = (
        "recv_x",
        "recv_topk_idx",
        "recv_topk_weights",
        "recv_expert_counts",
        "num_recv_tokens",
        "num_recv_tokens_written",
        "handle",
    )

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])

    def __repr__(self):
        return (
            f"MoeDispatchResult(num_recv_tokens={self.num_recv_tokens}, "
            f"recv_x shape {tuple(self.recv_x.shape)})"
        )


def _sizes(n):
    return (ctypes.c_size_t * n)()


class Comm:
    """A communicator over every rank of the job. Make one with weft.init().

    Attributes: rank, size, backend ("host" or "cuda"), device (the CUDA device index on the
    CUDA backend, else None). As a context manager it destroys itself on exit; on exit by an
    exception it aborts first, so that peers blocked in an operation this rank will never join
    see WEFT_ERR_PEER_LOST instead of waiting for their timeout.
    """

    def __init__(self, handle):
        lib = library()
        self._lib = lib  # for finalizers (library() takes a lock)
        # _handle: the C communicator for every call; None once destroy() has begun.
        # _abortable: the same for abort(), which weft.h allows while weft_comm_destroy runs
        # on another thread (its waits then end); None once weft_comm_destroy has returned.
        self._handle = handle
        self._abortable = handle
        # _lock serialises the operations (they may block) and destroy(). _state_lock guards
        # _handle for the local calls that never block (abort, stats, malloc and free, the
        # bookkeeping of MoE handles) against destroy() on another thread; it is never held
        # across a blocking call (weft_moe_handle_destroy, which waits for the device on CUDA,
        # runs after it is released), and re-entrant because __del__ of an array may run
        # inside it.
        self._lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._moe_handles = weakref.WeakSet()  # open MoeHandles: destroy() closes them first
        self._doomed = []  # C handles of garbage-collected MoeHandles (free_moe_handles)
        self._allocations = weakref.WeakSet()  # memory from empty() still viewed by an array
        self._doomed_allocations = []  # their pointers, when their finalizer found the lock held
        self.rank = lib.weft_comm_rank(handle)
        self.size = lib.weft_comm_size(handle)
        code = lib.weft_comm_backend(handle)
        self.backend = "cuda" if code == _BACKENDS["cuda"] else "host"
        device = lib.weft_comm_device(handle)
        self.device = device if device >= 0 else None

    def __repr__(self):
        if self._abortable is None:
            state = "destroyed"
        elif self._handle is None:
            state = "being destroyed"
        else:
            state = self.backend
        return f"<weft.Comm rank {self.rank} of {self.size}, {state}>"

    # -- lifetime ------------------------------------------------------------------------------

    def _live(self, call):
        handle = self._handle
        if handle is None:
            when = "was destroyed" if self._abortable is None else "is being destroyed"
            raise ValueError(f"{call}: the communicator {when}")
        return handle

    def _local(self, call, fn, *args):
        """fn(handle, *args): a C call that never blocks, safe against destroy() elsewhere."""
        with self._state_lock:
            handle = self._live(call)
            self._free_doomed_allocations()
            return fn(handle, *args)

    def _free_doomed_allocations(self):
        """Under _state_lock: weft_free the memory of empty() arrays whose finalizer found the
        lock held by another thread; after destroy() began, only forget it (the teardown
        frees it)."""
        while True:
            try:
                ptr = self._doomed_allocations.pop()
            except IndexError:
                return
            if self._handle is not None:
                self._lib.weft_free(self._handle, ptr)

    def _drain_doomed(self):
        """Destroy the C handles in the queue of garbage-collected MoeHandles; returns how
        many. Any thread, no lock: each pop() is atomic, so each handle is destroyed once."""
        freed = 0
        destroy = self._lib.weft_moe_handle_destroy
        while True:
            try:
                handle = self._doomed.pop()
            except IndexError:
                return freed
            destroy(handle)
            freed += 1

    def _reap(self):
        """At the start of each operation (collectives, MoE calls), outside every lock: on the
        host backend, free the MoE handles garbage-collected since (a host handle never
        waits). Not on the CUDA backend, where an attached handle's destroy waits for the
        device (cudaDeviceSynchronize), which CUDA forbids while any thread of the process
        captures a graph in global mode, and which no check here could see: there the queue
        is drained only by free_moe_handles(), MoeHandle.close() and destroy()."""
        if self._doomed and self.backend == "host":
            self._drain_doomed()
        if self._doomed_allocations:
            with self._state_lock:
                self._free_doomed_allocations()

    def free_moe_handles(self):
        """Free the C handles of the MoeHandles garbage-collected so far (their finalizers only
        queue them; see MoeHandle.__del__) and return how many. Local. On the CUDA backend
        each waits for the device, as MoeHandle.close() does: call it outside CUDA-graph
        capture, at a point of your choosing (once per training step, say); there, garbage
        collection frees a handle only here, in MoeHandle.close() and in destroy(). On the
        host backend every operation does it too. Also works after destroy() (nothing is
        left to free then)."""
        return self._drain_doomed()

    def destroy(self):
        """Collective: wait for every rank, then free everything, including memory from
        empty() and from the weft.torch allocator (arrays and tensors still using it must not be
        touched afterwards). Idempotent. Once it has begun, other calls raise ValueError, except
        abort() from another thread, which ends its waits for the peers (a rank that never
        comes, say): it then raises WeftError WEFT_ERR_ABORTED, the communicator freed all the
        same; an abort after the teardown passed those waits does nothing, and destroy()
        succeeds. If something raises before weft_comm_destroy (a warning made an error), the
        communicator is freed all the same and that exception propagates, with the library's
        WeftError as its weft_destroy_error (and a note) if weft_comm_destroy failed too. If
        the communicator backs PyTorch's allocator and the unbind fails (allocations
        or frees still running on other threads past the timeout), raises WeftError before
        anything is freed: the communicator stays usable."""
        with self._lock:
            if self._handle is None:
                return
            from . import torch as weft_torch

            weft_torch._forget(self)
            with self._state_lock:
                detached = []
                for moe_handle in list(self._moe_handles):
                    moe_handle._closing = True  # one in use is freed when its call returns
                    detached.append(moe_handle._detach())
                handle, self._handle = self._handle, None  # from here only abort() uses it
                live = len(self._allocations)
            failure = None
            try:
                while detached:  # outside _state_lock: on CUDA each waits for the device
                    # Popped first: a signal's exception delivered as the C call returns would
                    # otherwise leave a freed handle to be freed again below (a leak is better)
                    _destroy_moe_handle(detached.pop())
                self._drain_doomed()
                if live:
                    # A later communicator may map the same addresses: a stale array would then
                    # read and write its memory. Nothing can revoke a numpy array; say so.
                    warnings.warn(
                        f"destroy: {live} array(s) from empty() are still alive; their memory "
                        "is freed now and must not be touched (a later communicator may reuse "
                        "the addresses)", RuntimeWarning, stacklevel=2)
            except BaseException as exc:  # warnings as errors, say: the communicator goes all
                failure = exc             # the same, and exc is raised after
            _forget_default(self)
            try:
                # The error now: freeing MoE handles below clears this thread's message.
                error = status_error(library().weft_comm_destroy(handle))
            finally:
                # It returned: the communicator is gone, and abort() must not reach it.
                with self._state_lock:
                    self._abortable = None
            # Handles detached by weft_comm_destroy: freeing them frees host memory only. Those
            # of the list left by an exception, and those garbage-collected during the teardown
            # (a finalizer that ran before _abortable was cleared queued its handle for here).
            while detached:
                _destroy_moe_handle(detached.pop())
            self._drain_doomed()
            if failure is not None:
                if error is not None:  # keep the library's failure with the exception
                    failure.weft_destroy_error = error
                    if hasattr(failure, "add_note"):  # Python 3.11+
                        failure.add_note(f"weft_comm_destroy also failed: {error}")
                raise failure
            if error is not None:
                raise error

    def abort(self):
        """Local, never blocks: pending and future operations fail with WEFT_ERR_ABORTED and
        peers see WEFT_ERR_PEER_LOST. destroy() must still be called (the context manager
        does). Safe from any thread, also while destroy() runs on another thread: its waits for
        the peers end (destroy() raises WeftError WEFT_ERR_ABORTED), or, when its teardown is
        past them, the abort does nothing (and destroy() succeeds). Raises ValueError once
        destroy() has returned."""
        with self._state_lock:
            # The lock keeps destroy() from marking the communicator gone before this returns
            # (and the library's teardown waits for aborts in flight before it frees anything).
            # An abort that takes the lock in the instant between weft_comm_destroy's return
            # and that mark reaches a freed communicator; the library then finds it in no list
            # of live ones and does nothing (unless a new communicator of this process got the
            # same address in that instant).
            handle = self._abortable
            if handle is None:
                raise ValueError("abort: the communicator was destroyed")
            check(library().weft_comm_abort(handle))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._handle is None:
            return
        if exc_type is not None:
            with self._state_lock:
                if self._abortable is not None:
                    library().weft_comm_abort(self._abortable)
            try:
                self.destroy()
            except WeftError:
                pass  # the exception that brought us here is the one to report
        else:
            self.destroy()

    def stats(self):
        """weft_get_stats as a dict of ints: registrations_started, registrations_completed,
        bytes_registered, first_use_waits, first_use_wait_ns, zero_copy_ops, staged_ops,
        peer_mappings, staging_bytes, inline_ops, remote_store_ops, copy_engine_ops,
        sm_blocks."""
        out = _Stats()
        check(self._local("stats", library().weft_get_stats, ctypes.byref(out)))
        return {name: int(getattr(out, name)) for name in STATS_FIELDS}

    def empty(self, shape, dtype=np.float32):
        """A numpy array in memory from weft_malloc (host backend): registered with every peer
        in the background as soon as it exists, so collectives on it (and on any contiguous
        view of it) take the zero-copy path. Freed when the last view goes away; must not be
        used after destroy(). On the CUDA backend use weft.torch.mem_pool instead."""
        call = "empty"
        self._live(call)
        if self.backend != "host":
            raise ValueError(
                f"{call}: numpy memory needs the host backend; on the CUDA backend allocate "
                "tensors inside weft.torch.mem_pool(comm)"
            )
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"{call}: negative dimension in shape {shape}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype=dtype)
        ptr = ctypes.c_void_p()
        # One span of _state_lock from the allocation to its record, so that a destroy() on
        # another thread either comes first (ValueError here) or counts this array.
        with self._state_lock:
            self._free_doomed_allocations()
            check(library().weft_malloc(self._live(call), ctypes.byref(ptr), nbytes))
            allocation = _Allocation(self, ptr.value, shape, dtype)
        return np.asarray(allocation)

    # -- collectives ---------------------------------------------------------------------------

    def _run(self, call, fn, *args):
        self._reap()
        with self._lock:
            check(fn(self._live(call), *args))

    def all_reduce(self, tensor, op="sum"):
        """In place: tensor becomes the reduction over all ranks (bit-identical everywhere).
        Returns tensor."""
        call = "all_reduce"
        t = B.as_buffer(call, "tensor", tensor, writable=True)
        code = _redop(call, op)
        B.check_aligned(call, [t])
        B.check_device(call, self, [t])
        self._run(
            call, library().weft_all_reduce, t.ptr, t.ptr, t.numel, t.dtype, code,
            B.stream_of(self),
        )
        return tensor

    def all_gather_into_tensor(self, output_tensor, input_tensor):
        """output_tensor (size x input's elements) gets every rank's input, in rank order. In
        place when input_tensor is output_tensor's block of this rank. Returns output_tensor."""
        call = "all_gather_into_tensor"
        out = B.as_buffer(call, "output_tensor", output_tensor, writable=True)
        inp = B.as_buffer(call, "input_tensor", input_tensor)
        B.check_same_dtype(call, out, inp)
        B.check_numel(call, out, inp.numel * self.size, f"{self.size} ranks x the input's size")
        B.check_device(call, self, [out, inp])
        self._run(
            call, library().weft_all_gather, inp.ptr, out.ptr, inp.numel, inp.dtype,
            B.stream_of(self),
        )
        return output_tensor

    def reduce_scatter_tensor(self, output, input, op="sum"):
        """output gets block `rank` of the reduction of every rank's input (size x output's
        elements). In place when output is input's block of this rank. Returns output."""
        call = "reduce_scatter_tensor"
        out = B.as_buffer(call, "output", output, writable=True)
        inp = B.as_buffer(call, "input", input)
        code = _redop(call, op)
        B.check_same_dtype(call, out, inp)
        B.check_numel(call, inp, out.numel * self.size, f"{self.size} ranks x the output's size")
        B.check_aligned(call, [out, inp])
        B.check_device(call, self, [out, inp])
        self._run(
            call, library().weft_reduce_scatter, inp.ptr, out.ptr, out.numel, out.dtype, code,
            B.stream_of(self),
        )
        return output

    def broadcast(self, tensor, src):
        """tensor on every rank becomes tensor on rank src. Returns tensor."""
        call = "broadcast"
        src = _rank_arg(call, "src", src, self.size)
        t = B.as_buffer(call, "tensor", tensor, writable=self.rank != src)  # the root only reads
        B.check_device(call, self, [t])
        self._run(
            call, library().weft_broadcast, t.ptr, t.ptr, t.numel, t.dtype, src,
            B.stream_of(self),
        )
        return tensor

    def all_to_all_single(
        self, output, input, output_split_sizes=None, input_split_sizes=None
    ):
        """Split input along its first dimension, send block p to rank p, and concatenate the
        blocks received, in rank order, into output. Without split sizes every block has
        shape[0] / size rows (which must divide); with them, block p has split_sizes[p] rows
        (rows are shape[1:] slices, the same for input and output). Returns output."""
        call = "all_to_all_single"
        out = B.as_buffer(call, "output", output, writable=True)
        inp = B.as_buffer(call, "input", input)
        B.check_same_dtype(call, out, inp)
        B.check_device(call, self, [out, inp])
        n = self.size
        row_in = _row_elements(call, inp)
        row_out = _row_elements(call, out)
        if inp.numel and out.numel and row_in != row_out:
            raise ValueError(
                f"{call}: input rows have {row_in} elements but output rows have {row_out} "
                "(shape[1:] must match)"
            )
        stream = B.stream_of(self)
        lib = library()
        if output_split_sizes is None and input_split_sizes is None:
            _even_rows(call, inp, n)
            _even_rows(call, out, n)
            B.check_numel(call, out, inp.numel, "all-to-all keeps the size")
            self._run(call, lib.weft_all_to_all, inp.ptr, out.ptr, inp.numel // n, inp.dtype,
                      stream)
            return output
        in_rows = _splits(call, "input_split_sizes", input_split_sizes, inp, n)
        out_rows = _splits(call, "output_split_sizes", output_split_sizes, out, n)
        if in_rows[self.rank] != out_rows[self.rank]:
            raise ValueError(
                f"{call}: this rank sends itself {in_rows[self.rank]} rows but expects "
                f"{out_rows[self.rank]} from itself"
            )
        sendcounts, sdispls = _sizes(n), _sizes(n)
        recvcounts, rdispls = _sizes(n), _sizes(n)
        s_off = r_off = 0
        # Each side in its own row size: with no elements on one side its shape[1:] was not
        # compared, and the other side's rows must not size its blocks.
        for p in range(n):
            sendcounts[p], sdispls[p] = in_rows[p] * row_in, s_off * row_in
            recvcounts[p], rdispls[p] = out_rows[p] * row_out, r_off * row_out
            s_off += in_rows[p]
            r_off += out_rows[p]
        self._run(
            call, lib.weft_all_to_allv, inp.ptr, sendcounts, sdispls, out.ptr, recvcounts,
            rdispls, inp.dtype, stream,
        )
        return output

    def barrier(self):
        """Every rank waits until all have called it. On the CUDA backend the barrier is
        queued on the current stream, and barrier() then also waits for that stream (as
        torch.distributed's does), except during CUDA-graph capture."""
        call = "barrier"
        stream = B.stream_of(self)
        self._run(call, library().weft_barrier, stream)
        if self.backend == "cuda":
            torch = B.torch_module()
            if torch is not None and not torch.cuda.is_current_stream_capturing():
                torch.cuda.current_stream(self.device).synchronize()

    # -- mixture of experts --------------------------------------------------------------------

    def moe_dispatch(self, x, topk_idx=None, topk_weights=None, num_experts=None, *,
                     handle=None):
        """Send each row of x (num_tokens x hidden; float32, float16 or bfloat16) to every rank
        that owns one of its experts (rank r owns experts [r*E/size, (r+1)*E/size) of
        num_experts = E). topk_idx (int64) and topk_weights (float32) are num_tokens x topk;
        expert -1 is masked. Returns a MoeDispatchResult; see weft_moe_dispatch in weft.h for
        the order and meaning of what is received. The outputs are sized exactly: one small
        all-to-all of per-rank token counts runs first.

        With handle (the MoeHandle of an earlier dispatch; the backward pass), x (of that
        dispatch's shape and dtype) goes along the same routing, which is neither given nor
        recomputed (WEFT_MOE_REUSE): the result has recv_x, num_recv_tokens and that handle,
        and None for the routing outputs."""
        call = "moe_dispatch"
        if handle is not None:
            if topk_idx is not None or topk_weights is not None or num_experts is not None:
                raise ValueError(f"{call}: with handle, the routing is the handle's: pass no "
                                 "topk_idx, topk_weights or num_experts")
            return self._moe_dispatch_reuse(call, x, handle)
        if topk_idx is None or topk_weights is None or num_experts is None:
            raise TypeError(f"{call}: topk_idx, topk_weights and num_experts are required "
                            "without handle")
        self._live(call)
        xb = B.as_buffer(call, "x", x)
        ib = B.as_buffer(call, "topk_idx", topk_idx)
        wb = B.as_buffer(call, "topk_weights", topk_weights)
        for name, b in (("topk_idx", ib), ("topk_weights", wb)):
            if b.kind != xb.kind:
                raise TypeError(f"{call}: {name} is a {b.kind} buffer but x is {xb.kind}; they "
                                "must be of one kind")
        B.check_aligned(call, [xb, ib, wb])
        B.check_device(call, self, [xb, ib, wb])
        if xb.dtype not in (B.FLOAT32, B.FLOAT16, B.BFLOAT16):
            raise TypeError(f"{call}: x has dtype {xb.dtype_name}; it must be float32, float16 "
                            "or bfloat16")
        if ib.dtype != B.INT64:
            raise TypeError(f"{call}: topk_idx has dtype {ib.dtype_name}; it must be int64")
        if wb.dtype != B.FLOAT32:
            raise TypeError(f"{call}: topk_weights has dtype {wb.dtype_name}; it must be float32")
        if len(xb.shape) != 2 or xb.shape[1] == 0:
            raise ValueError(f"{call}: x must be num_tokens x hidden with hidden > 0, not shape "
                             f"{xb.shape}")
        num_tokens, hidden = xb.shape
        if len(ib.shape) != 2 or ib.shape[0] != num_tokens or ib.shape[1] == 0:
            raise ValueError(f"{call}: topk_idx must be num_tokens x topk ({num_tokens} x k, "
                             f"k > 0), not shape {ib.shape}")
        topk = _c_int(call, "topk", ib.shape[1])
        if wb.shape != ib.shape:
            raise ValueError(f"{call}: topk_weights has shape {wb.shape}, topk_idx {ib.shape}; "
                             "they must be equal")
        num_experts = _c_int(call, "num_experts", int(num_experts))
        if num_experts < 1 or num_experts % self.size:
            raise ValueError(f"{call}: num_experts {num_experts} is not a positive multiple of "
                             f"the rank count {self.size}")
        if topk > num_experts:
            raise ValueError(f"{call}: topk {topk} exceeds num_experts {num_experts}")
        per_rank = num_experts // self.size
        send_counts = _tokens_per_rank(call, topk_idx, xb.kind, num_experts, per_rank, self.size)
        recv_counts = B.empty_like_kind(B.as_buffer(call, "counts", send_counts), (self.size,),
                                        "same")
        self.all_to_all_single(recv_counts, send_counts)
        num_recv = int(recv_counts.sum())

        recv_x = B.empty_like_kind(xb, (num_recv, hidden), "same")
        recv_idx = B.empty_like_kind(xb, (num_recv, topk), "int64")
        recv_w = B.empty_like_kind(xb, (num_recv, topk), "float32")
        recv_counts_e = B.empty_like_kind(xb, (per_rank,), "int64")
        # *num_recv_tokens is written where the other outputs are (device memory on CUDA).
        got = B.empty_like_kind(xb, (1,), "int64")
        ptrs = [B.as_buffer(call, "out", a, writable=True).ptr
                for a in (recv_x, recv_idx, recv_w, recv_counts_e, got)]
        moe = ctypes.c_void_p()
        self._reap()
        # The counts exchanged above fix the number (on CUDA got is still being written).
        n = num_recv
        dispatched, h = False, None
        try:
            # The MoeHandle is made (and registered with the communicator) under _lock, which
            # destroy() takes: a destroy() on another thread either came first (_live raises)
            # or waits and then closes this handle; none can slip in between.
            with self._lock:
                check(library().weft_moe_dispatch(
                    self._live(call), xb.ptr, num_tokens, hidden, xb.dtype, ib.ptr, wb.ptr,
                    topk, num_experts, ptrs[0], ptrs[1], ptrs[2], ptrs[3], num_recv, ptrs[4],
                    ctypes.byref(moe), B.stream_of(self),
                ))
                dispatched = True
                self._check_num_recv(call, got, n)
                h = MoeHandle(self, moe, xb, n)
        finally:
            if dispatched and h is None:  # outside the lock (on CUDA it waits for the device)
                _destroy_moe_handle(moe)
        return MoeDispatchResult(
            recv_x=recv_x[:n],
            recv_topk_idx=recv_idx[:n],
            recv_topk_weights=recv_w[:n],
            recv_expert_counts=recv_counts_e,
            num_recv_tokens=n,
            num_recv_tokens_written=got,
            handle=h,
        )

    def _check_num_recv(self, call, got, expected):
        """On the host backend the dispatch is complete: the *num_recv_tokens it wrote into got
        must be the count the exchange before it gave (the outputs were sized by it). On CUDA
        it is still being written; reading it would wait for the stream (and break capture).
        The WEFT_ERR_INTERNAL raised here is Python's, not the library's: the dispatch completed
        on every rank, and the communicator stays usable (docs/python.md)."""
        if self.backend != "host":
            return
        written = int(got[0])
        if written != expected:
            raise WeftError("WEFT_ERR_INTERNAL",
                            f"{call}: the library wrote num_recv_tokens = {written}, but the "
                            f"token counts exchanged before the call give {expected}")

    def _moe_dispatch_reuse(self, call, x, handle):
        self._live(call)
        self._check_moe_handle(call, handle)
        xb = B.as_buffer(call, "x", x)
        B.check_aligned(call, [xb])
        B.check_device(call, self, [xb])
        hx = handle._x
        if xb.dtype != hx.dtype or len(xb.shape) != 2 or xb.shape[0] != handle.num_tokens or \
                xb.shape[1] != handle.hidden:
            raise ValueError(f"{call}: x has shape {xb.shape} and dtype {xb.dtype_name}; reusing "
                             f"the handle's layout needs ({handle.num_tokens}, {handle.hidden}) "
                             f"and {hx.dtype_name}")
        n = handle.num_recv_tokens
        recv_x = B.empty_like_kind(xb, (n, handle.hidden), "same")
        got = B.empty_like_kind(xb, (1,), "int64")
        ptrs = [B.as_buffer(call, "out", a, writable=True).ptr for a in (recv_x, got)]
        self._reap()
        with handle._pinned(call) as pinned, self._lock:
            comm = self._live(call)  # destroy() closes handles: the communicator first
            moe = ctypes.c_void_p(pinned.value)  # in: the layout; left as is
            check(library().weft_moe_dispatch(
                comm, xb.ptr, handle.num_tokens, handle.hidden, xb.dtype, None, None,
                MOE_REUSE, 0, ptrs[0], None, None, None, n, ptrs[1], ctypes.byref(moe),
                B.stream_of(self),
            ))
            self._check_num_recv(call, got, n)  # before a destroy() can begin
        return MoeDispatchResult(recv_x=recv_x, recv_topk_idx=None, recv_topk_weights=None,
                                 recv_expert_counts=None, num_recv_tokens=n,
                                 num_recv_tokens_written=got, handle=handle)

    def _check_moe_handle(self, call, handle):
        if not isinstance(handle, MoeHandle):
            raise TypeError(f"{call}: handle must be the MoeHandle of a moe_dispatch, not "
                            f"{type(handle).__name__}")
        if handle.closed:
            raise ValueError(f"{call}: handle was closed")
        if handle._comm is not self:
            raise ValueError(f"{call}: handle comes from a dispatch on another communicator")

    def moe_combine(self, handle, y, out=None):
        """The reverse of the dispatch that made handle: y has one row per received token, in
        dispatch order (num_recv_tokens x hidden, the dispatch's dtype); returns out
        (num_tokens x hidden, allocated if None) whose row t sums, over the ranks that received
        token t, their row for it (float32 accumulation in rank order)."""
        call = "moe_combine"
        self._live(call)
        self._check_moe_handle(call, handle)
        xb = handle._x
        yb = B.as_buffer(call, "y", y)
        B.check_aligned(call, [yb])
        B.check_device(call, self, [yb])
        if yb.kind != xb.kind:
            raise TypeError(f"{call}: y is a {yb.kind} buffer but the dispatch's x was {xb.kind}")
        B.check_same_dtype(call, yb, xb)
        if yb.shape != (handle.num_recv_tokens, handle.hidden):
            raise ValueError(f"{call}: y has shape {yb.shape}, expected "
                             f"({handle.num_recv_tokens}, {handle.hidden}) (received tokens x "
                             "hidden)")
        if out is None:
            out = B.empty_like_kind(xb, (handle.num_tokens, handle.hidden), "same")
        ob = B.as_buffer(call, "out", out, writable=True)
        B.check_aligned(call, [ob])
        B.check_device(call, self, [ob])
        B.check_same_dtype(call, ob, xb)
        if ob.shape != (handle.num_tokens, handle.hidden):
            raise ValueError(f"{call}: out has shape {ob.shape}, expected "
                             f"({handle.num_tokens}, {handle.hidden})")
        self._reap()
        with handle._pinned(call) as pinned, self._lock:
            check(library().weft_moe_combine(self._live(call), pinned, yb.ptr, ob.ptr,
                                             B.stream_of(self)))
        return out


# -- helpers ---------------------------------------------------------------------------------


def _c_int(call, name, value):
    """value, checked to fit the C int it is passed as: ctypes would silently keep only its low
    bits (2**32 + 4 experts would reach the library as 4)."""
    lo, hi = _C_INT_RANGE
    if not lo <= value <= hi:
        raise ValueError(f"{call}: {name} {value} is outside the range of a C int "
                         f"[{lo}, {hi}]")
    return value


def _rank_arg(call, name, value, size):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{call}: {name} must be an int, not {type(value).__name__}")
    if not 0 <= int(value) < size:
        raise ValueError(f"{call}: {name} {value} is not a rank in [0, {size})")
    return int(value)


def _row_elements(call, buf):
    """Elements per row (per index of the first dimension)."""
    shape = buf.shape
    if len(shape) == 0:
        raise ValueError(f"{call}: {buf.what} is 0-dimensional; all-to-all splits dimension 0")
    return int(np.prod(shape[1:], dtype=np.int64))


def _even_rows(call, buf, n):
    if buf.shape[0] % n:
        raise ValueError(f"{call}: {buf.what} has {buf.shape[0]} rows, not divisible by the "
                         f"{n} ranks (pass split sizes for uneven blocks)")


def _splits(call, name, sizes, buf, n):
    """Rows per rank: the given split sizes, checked, or an even split of buf's rows."""
    if sizes is None:
        _even_rows(call, buf, n)
        return [buf.shape[0] // n] * n
    try:
        rows = [int(s) for s in sizes]
    except (TypeError, ValueError):
        raise TypeError(f"{call}: {name} must be a sequence of {n} ints") from None
    if len(rows) != n:
        raise ValueError(f"{call}: {name} has {len(rows)} entries, expected one per rank ({n})")
    if any(r < 0 for r in rows):
        raise ValueError(f"{call}: {name} {rows} has a negative entry")
    if sum(rows) != buf.shape[0]:
        raise ValueError(f"{call}: {name} sums to {sum(rows)} rows but {buf.what} has "
                         f"{buf.shape[0]}")
    return rows


def _tokens_per_rank(call, topk_idx, kind, num_experts, per_rank, n):
    """int64 array (of topk_idx's kind) of n entries: how many tokens go to each rank (a token
    counts once per rank however many of its experts live there). Rejects bad expert ids."""
    if kind == "numpy":
        idx = topk_idx
        if idx.size and (idx.min() < -1 or idx.max() >= num_experts):
            raise ValueError(f"{call}: topk_idx has entries outside [-1, {num_experts})")
        owner = np.where(idx >= 0, idx // per_rank, n)
        hit = np.zeros((idx.shape[0], n + 1), dtype=bool)
        hit[np.arange(idx.shape[0])[:, None], owner] = True
        return hit[:, :n].sum(axis=0).astype(np.int64)
    torch = B.torch_module()
    idx = topk_idx
    if idx.numel() and (int(idx.min()) < -1 or int(idx.max()) >= num_experts):
        raise ValueError(f"{call}: topk_idx has entries outside [-1, {num_experts})")
    owner = torch.where(idx >= 0, torch.div(idx, per_rank, rounding_mode="floor"),
                        torch.full_like(idx, n))
    hit = torch.zeros((idx.shape[0], n + 1), dtype=torch.int64, device=idx.device)
    hit.scatter_(1, owner, 1)
    return hit[:, :n].sum(dim=0)


# -- the default communicator ----------------------------------------------------------------

_default = None


def _set_default(comm):
    global _default
    if _default is None:
        _default = comm


def _forget_default(comm):
    global _default
    if _default is comm:
        _default = None


def default_comm(comm=None):
    """comm if given, else the communicator of the first weft.init() still alive."""
    if comm is not None:
        return comm
    if _default is None:
        raise RuntimeError("weft: no communicator: call weft.init() first (or pass comm=)")
    return _default


def _init_config(lib, backend, timeout_s, registration, host_workers):
    """init's keyword overrides over the defaults, as a _Config; None when there are none.
    Raises ValueError for a bad value."""
    if (backend, timeout_s, registration, host_workers) == (None, None, None, None):
        return None
    cfg = _Config()
    lib.weft_config_default(ctypes.byref(cfg))
    if backend is not None:
        if backend not in _BACKENDS:
            raise ValueError(f"init: backend {backend!r} is not 'auto', 'host' or 'cuda'")
        cfg.backend = _BACKENDS[backend]
    if registration is not None:
        if registration not in _REGISTRATIONS:
            raise ValueError(f"init: registration {registration!r} is not 'roa', 'jit' or 'staged'")
        cfg.registration = _REGISTRATIONS[registration]
    if timeout_s is not None:
        lo, hi = _TIMEOUT_S_RANGE
        if not lo <= timeout_s <= hi:
            raise ValueError(f"init: timeout_s {timeout_s!r} is not in [{lo:g}, {hi:g}] s")
        cfg.timeout_s = float(timeout_s)
    if host_workers is not None:
        if int(host_workers) < 1:
            raise ValueError(f"init: host_workers {host_workers!r} must be at least 1")
        cfg.host_workers = _c_int("init", "host_workers", int(host_workers))
    return cfg


def init(backend=None, timeout_s=None, registration=None, host_workers=None):
    """Create a communicator over every rank of the job (collective). The rank, the rank count
    and the rendezvous come from the environment that weftrun or torchrun sets (WEFT_RANK or
    RANK, WEFT_NRANKS or WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...); the other settings from
    the WEFT_* variables (docs/config.md) unless given here: backend "auto", "host" or "cuda",
    timeout_s, registration "roa", "jit" or "staged", host_workers. The first communicator
    made becomes the default of the module-level functions (weft.all_reduce, ...). On the CUDA
    backend, comm.device is the device the library chose; make it torch's current device
    (torch.cuda.set_device(comm.device)) as with torchrun."""
    lib = library()
    try:
        cfg = _init_config(lib, backend, timeout_s, registration, host_workers)
    except Exception:  # ValueError, or TypeError from a value of the wrong type
        # A call the C library refuses still takes its rendezvous number (weft.h: the k-th
        # weft_comm_init of each rank meets the k-th of the others), so that a rank whose
        # arguments were wrong does not fall one behind peers whose calls went ahead: take it
        # the same way (a NULL comm is refused after the number is taken).
        lib.weft_comm_init(None, None)
        raise
    handle = ctypes.c_void_p()
    check(lib.weft_comm_init(ctypes.byref(handle), None if cfg is None else ctypes.byref(cfg)))
    try:
        comm = Comm(handle)
    except BaseException:
        # Every rank has joined the C communicator, and peers may already wait in its first
        # operation: abort (they fail at once with WEFT_ERR_PEER_LOST), then free it (local
        # after an abort), so that nothing of it outlives the exception.
        lib.weft_comm_abort(handle)
        lib.weft_comm_destroy(handle)
        raise
    _set_default(comm)
    return comm
