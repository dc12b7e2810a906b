"""PyTorch's CUDA allocator backed by weft_malloc: registration-on-allocation for tensors.

Two ways in, both over the C functions of include/weft_torch.h, which libweft exports:

* ``weft.torch.mem_pool(comm)`` returns a ``torch.cuda.MemPool`` whose segments come from
  weft_malloc. Every tensor allocated inside ``with torch.cuda.use_mem_pool(pool):`` is
  registered with every peer in the background as soon as it exists, so collectives on it (and
  on any view of it) take the zero-copy path. PyTorch's caching allocator still carves tensors
  out of the segments and keeps freed blocks for reuse; weft sees one allocation per segment.
* ``weft.torch.use_weft_allocator(comm)`` makes weft the allocator of every CUDA tensor of the
  process, with no caching (each tensor is one weft_malloc, each free waits for the device as
  cudaFree does). It must be called before the process's first CUDA allocation.

Tensors allocated elsewhere (plain ``torch.empty(..., device="cuda")``) still work with every
collective: they take the staged path (copied through weft's registered scratch), counted in
``comm.stats()["staged_ops"]``.

Lifetime: the allocator functions use one communicator per process (weft_torch_bind). Destroy
the pools and the tensors allocated from them before the communicator: destroy() frees all of
its memory and unbinds it. The unbind waits for allocations and frees running on other threads;
if they outlast the communicator's timeout, destroy() raises WeftError (WEFT_ERR_TIMEOUT) and
frees nothing: the communicator stays bound and usable (abort() works; destroy() may be called
again). Until PyTorch has returned every segment of a destroyed
communicator, binding another one raises WeftError (its frees could release the new one's memory
at the same addresses).

torch is imported when a function here is called, not when this module is imported.
"""

from ._lib import WeftError, check, library, library_path

_bound = None  # the Comm bound with weft_torch_bind, or None
_allocators = []  # every CUDAPluggableAllocator made here, kept alive with the process


def _require_cuda(call, comm):
    if comm.backend != "cuda":
        raise ValueError(
            f"{call}: the communicator uses the {comm.backend} backend; PyTorch's CUDA "
            "allocator needs the CUDA backend (WEFT_BACKEND=cuda)"
        )


def _bind(call, comm):
    global _bound
    _require_cuda(call, comm)
    if _bound is not None and _bound is not comm and _bound._handle is not None:
        raise ValueError(
            f"{call}: another communicator ({_bound!r}) already backs PyTorch's allocator in "
            "this process; destroy it first"
        )
    check(library().weft_torch_bind(comm._live(call)))
    _bound = comm


def _forget(comm):
    """Called by Comm.destroy before it frees anything: unbind comm if it is the bound one.

    weft_torch_bind(NULL) first waits for the allocations and frees in flight on other threads;
    after the communicator's timeout it fails (WEFT_ERR_TIMEOUT) and keeps the binding, and
    those calls may still use the communicator. Then this raises WeftError with the library's
    message and comm stays bound, so that destroy() frees nothing (comm stays usable and
    abortable; destroy() again retries the unbind)."""
    global _bound
    if _bound is comm:
        check(library().weft_torch_bind(None))
        _bound = None


def _pluggable_allocator(torch):
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        library_path(), "weft_torch_alloc", "weft_torch_free"
    )
    _allocators.append(allocator)
    return allocator


def mem_pool(comm):
    """A torch.cuda.MemPool whose memory comes from weft_malloc on comm (CUDA backend).

    Use it with ``with torch.cuda.use_mem_pool(pool):``; every tensor allocated inside is
    registered at allocation, and collectives on it are zero-copy. Keep the pool (and its
    tensors) no longer than comm."""
    import torch

    call = "weft.torch.mem_pool"
    _require_cuda(call, comm)
    if not hasattr(torch.cuda, "MemPool"):
        raise RuntimeError(f"{call}: this PyTorch ({torch.__version__}) has no torch.cuda.MemPool")
    _bind(call, comm)
    return torch.cuda.MemPool(_pluggable_allocator(torch).allocator())


def use_weft_allocator(comm):
    """Make weft_malloc on comm the allocator of every CUDA tensor of this process (no caching:
    one weft_malloc per tensor). Call it right after weft.init(), before anything allocates
    CUDA memory through PyTorch (or initialises PyTorch's CUDA state); afterwards PyTorch cannot
    swap its allocator and this raises RuntimeError."""
    import torch

    call = "weft.torch.use_weft_allocator"
    previous = _bound
    _bind(call, comm)
    try:
        torch.cuda.memory.change_current_allocator(_pluggable_allocator(torch))
    except RuntimeError as exc:
        unbind = ""
        if previous is not comm:
            try:
                _forget(comm)
            except WeftError as err:  # still bound to comm; its destroy() retries the unbind
                unbind = (f" Undoing the binding to comm failed too ({err}); it stays bound "
                          "until comm.destroy().")
        raise RuntimeError(
            f"{call} must be called before the first CUDA allocation of the process (and "
            "before anything that initialises PyTorch's CUDA state, such as "
            f"torch.cuda.set_device); PyTorch refused to swap its allocator: {exc}. "
            f"weft.torch.mem_pool(comm) works at any time.{unbind}"
        ) from exc
