"""Arrays and tensors as C buffers: dtype, pointer, size, device, and every check made before a
call reaches the C library.

A buffer is a numpy array or a torch tensor. torch is never imported here: an object can only be
a torch tensor if the caller already imported torch, so sys.modules tells.

Checks, each raising before anything is sent (so a rank never enters a collective its peers
would wait in with bad arguments of its own making):
  TypeError   not an array or tensor; a dtype weft has no reduction for; dtypes that differ
  ValueError  non-contiguous; not aligned to its elements (reductions, MoE); read-only output;
              wrong size; wrong device or backend
"""

import sys

import numpy as np

# weft_dtype_t values (include/weft.h).
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = range(10)

DTYPE_NAMES = (
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)

_NUMPY_DTYPES = {
    np.dtype(np.int8): INT8,
    np.dtype(np.uint8): UINT8,
    np.dtype(np.int32): INT32,
    np.dtype(np.uint32): UINT32,
    np.dtype(np.int64): INT64,
    np.dtype(np.uint64): UINT64,
    np.dtype(np.float16): FLOAT16,
    np.dtype(np.float32): FLOAT32,
    np.dtype(np.float64): FLOAT64,
}

_SUPPORTED_TEXT = (
    "int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, "
    "and bfloat16 (torch tensors only)"
)


def torch_module():
    """torch if the process imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def _torch_dtypes(torch):
    table = {
        torch.int8: INT8,
        torch.uint8: UINT8,
        torch.int32: INT32,
        torch.int64: INT64,
        torch.float16: FLOAT16,
        torch.bfloat16: BFLOAT16,
        torch.float32: FLOAT32,
        torch.float64: FLOAT64,
    }
    # torch.uint32 and torch.uint64 exist from torch 2.3 on.
    for name, code in (("uint32", UINT32), ("uint64", UINT64)):
        dtype = getattr(torch, name, None)
        if dtype is not None:
            table[dtype] = code
    return table


class Buffer:
    """One array or tensor seen as C memory.

    obj     the array or tensor
    what    its name in error messages ("tensor", "output", ...)
    kind    "numpy" or "torch"
    device  "cpu" or "cuda"; index is the CUDA device index (None on the CPU)
    dtype   the weft_dtype_t value; numel, nbytes, ptr as their names say
    """

    __slots__ = ("obj", "what", "kind", "device", "index", "dtype", "numel", "nbytes", "ptr")

    @property
    def dtype_name(self):
        return DTYPE_NAMES[self.dtype]

    @property
    def shape(self):
        return tuple(self.obj.shape)


def as_buffer(call, what, obj, writable=False):
    """Check obj and describe it as a Buffer. call names the operation in error messages."""
    buf = Buffer()
    buf.obj = obj
    buf.what = what
    if isinstance(obj, np.ndarray):
        dtype = _NUMPY_DTYPES.get(obj.dtype)
        if dtype is None:
            raise TypeError(
                f"{call}: {what} has dtype {obj.dtype}, which weft does not support "
                f"(supported: {_SUPPORTED_TEXT})"
            )
        if not obj.flags.c_contiguous:
            raise ValueError(
                f"{call}: {what} is not C-contiguous (strides {obj.strides} for shape "
                f"{obj.shape}): pass np.ascontiguousarray({what}) or a contiguous slice"
            )
        if writable and not obj.flags.writeable:
            raise ValueError(f"{call}: {what} is read-only, but the operation writes it")
        buf.kind = "numpy"
        buf.device = "cpu"
        buf.index = None
        buf.dtype = dtype
        buf.numel = int(obj.size)
        buf.nbytes = int(obj.nbytes)
        buf.ptr = int(obj.ctypes.data)
        return buf

    torch = torch_module()
    if torch is not None and isinstance(obj, torch.Tensor):
        dtype = _torch_dtypes(torch).get(obj.dtype)
        if dtype is None:
            raise TypeError(
                f"{call}: {what} has dtype {obj.dtype}, which weft does not support "
                f"(supported: {_SUPPORTED_TEXT})"
            )
        if obj.layout != torch.strided:
            raise ValueError(f"{call}: {what} has layout {obj.layout}; weft needs dense tensors")
        if not obj.is_contiguous():
            raise ValueError(
                f"{call}: {what} is not contiguous (stride {tuple(obj.stride())} for shape "
                f"{tuple(obj.shape)}): pass {what}.contiguous() or a contiguous view"
            )
        if obj.device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"{call}: {what} is on device {obj.device}; weft takes CPU and CUDA tensors"
            )
        buf.kind = "torch"
        buf.device = obj.device.type
        buf.index = obj.device.index if buf.device == "cuda" else None
        buf.dtype = dtype
        buf.numel = int(obj.numel())
        buf.nbytes = buf.numel * int(obj.element_size())
        buf.ptr = int(obj.data_ptr())
        return buf

    raise TypeError(
        f"{call}: {what} must be a numpy.ndarray or a torch.Tensor, not {type(obj).__name__}"
    )


def check_same_dtype(call, a, b):
    if a.dtype != b.dtype:
        raise TypeError(
            f"{call}: {a.what} has dtype {a.dtype_name} but {b.what} has dtype {b.dtype_name}; "
            "they must be equal"
        )


def check_numel(call, buf, expected, why):
    if buf.numel != expected:
        raise ValueError(
            f"{call}: {buf.what} has {buf.numel} elements (shape {buf.shape}), expected "
            f"{expected} ({why})"
        )


def check_aligned(call, bufs):
    """Every buffer with elements starts at a multiple of its element size: the library refuses
    others in reductions and MoE calls (WEFT_ERR_INVALID_ARGUMENT), which would come after the
    counts exchange a MoE dispatch makes first."""
    for buf in bufs:
        if buf.numel and buf.ptr % (buf.nbytes // buf.numel):
            raise ValueError(
                f"{call}: {buf.what} at {buf.ptr:#x} is not aligned to its "
                f"{buf.nbytes // buf.numel}-byte {buf.dtype_name} elements: pass a copy "
                f"({buf.what}.copy())"
            )


def check_device(call, comm, bufs):
    """Every buffer must live where the communicator's backend works: host memory (numpy arrays,
    CPU tensors) on the host backend, CUDA tensors on the communicator's device on the CUDA
    backend."""
    for buf in bufs:
        if comm.backend == "host":
            if buf.device != "cpu":
                raise ValueError(
                    f"{call}: {buf.what} is a CUDA tensor ({buf.obj.device}), but the "
                    "communicator uses the host backend: pass numpy arrays or CPU tensors, or "
                    "run with WEFT_BACKEND=cuda"
                )
        else:
            if buf.device != "cuda":
                where = "a numpy array" if buf.kind == "numpy" else "a CPU tensor"
                raise ValueError(
                    f"{call}: {buf.what} is {where}, but the communicator uses the CUDA "
                    "backend: pass CUDA tensors"
                )
            if comm.device is not None and buf.index != comm.device:
                raise ValueError(
                    f"{call}: {buf.what} is on cuda:{buf.index}, but this rank's communicator "
                    f"uses cuda:{comm.device}"
                )


def stream_of(comm):
    """The stream argument for the C call: NULL on the host backend, torch's current stream on
    the communicator's device on the CUDA backend."""
    if comm.backend != "cuda":
        return None
    torch = torch_module()
    if torch is None:
        return None
    return torch.cuda.current_stream(comm.device).cuda_stream or None


def empty_like_kind(template, shape, dtype):
    """A new uninitialised array or tensor of the template buffer's kind and device. dtype is
    "same" (the template's dtype), "int64" or "float32"."""
    if template.kind == "numpy":
        np_dtype = template.obj.dtype if dtype == "same" else np.dtype(dtype)
        return np.empty(shape, dtype=np_dtype)
    torch = torch_module()
    t_dtype = template.obj.dtype if dtype == "same" else getattr(torch, dtype)
    return torch.empty(shape, dtype=t_dtype, device=template.obj.device)
