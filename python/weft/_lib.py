"""The C library: where it is found, its function prototypes, and errors.

libweft is loaded with ctypes.CDLL, which releases the GIL for the duration of every foreign
call, so a rank blocked in a collective never stops the process's other Python threads.

The library is looked up, in order, at
  1. the path in the environment variable WEFT_LIBRARY;
  2. the copy bundled in this package (``pip install ./python`` builds and bundles it).
Nothing else is searched: a library picked up from an unrelated directory would be a silent
version mismatch.
"""

import ctypes
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUNDLED_LIBRARY = os.path.join(_HERE, "libweft.so")
_BUNDLED_LAUNCHER = os.path.join(_HERE, "weftrun")

# The weft_status_t enum of include/weft.h, in order (WEFT_STATUS_MAP there fixes the names and
# their order).
STATUS_NAMES = (
    "WEFT_SUCCESS",
    "WEFT_ERR_INVALID_ARGUMENT",
    "WEFT_ERR_UNSUPPORTED",
    "WEFT_ERR_NO_MEMORY",
    "WEFT_ERR_SYSTEM",
    "WEFT_ERR_CUDA",
    "WEFT_ERR_PEER_LOST",
    "WEFT_ERR_TIMEOUT",
    "WEFT_ERR_MISMATCH",
    "WEFT_ERR_ABORTED",
    "WEFT_ERR_INTERNAL",
)


class WeftError(RuntimeError):
    """A weft call failed.

    ``status`` is the name of the weft_status_t value (``"WEFT_ERR_PEER_LOST"``), ``message``
    the text of weft_last_error(): which call, which argument, why. After WEFT_ERR_PEER_LOST,
    WEFT_ERR_TIMEOUT, WEFT_ERR_ABORTED or WEFT_ERR_INTERNAL the communicator is unusable except
    for abort() and destroy(); after WEFT_ERR_INVALID_ARGUMENT it stays usable.
    """

    def __init__(self, status, message):
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self):
        return f"{self.status}: {self.message}"


def library_path():
    """The path of the libweft shared library this package uses (see the module's docstring).

    Raises OSError naming both places if neither has it."""
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise OSError(f"weft: WEFT_LIBRARY={env!r} is not a file")
        return os.path.abspath(env)
    if os.path.isfile(_BUNDLED_LIBRARY):
        return _BUNDLED_LIBRARY
    raise OSError(
        "weft: libweft not found: set WEFT_LIBRARY to the path of libweft.so (a CMake build "
        f"puts it at BUILD_DIR/libweft.so), or install the package with `pip install ./python`, "
        f"which bundles it at {_BUNDLED_LIBRARY}"
    )


def launcher_path():
    """The path of the weftrun launcher: WEFT_WEFTRUN, else the copy bundled in this package,
    else the weftrun next to the library named by WEFT_LIBRARY (a CMake build directory holds
    both). Raises OSError if none exists."""
    candidates = []
    env = os.environ.get("WEFT_WEFTRUN")
    if env:
        candidates.append(env)
    candidates.append(_BUNDLED_LAUNCHER)
    lib = os.environ.get("WEFT_LIBRARY")
    if lib:
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(lib)), "weftrun"))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise OSError("weft: weftrun not found; tried " + ", ".join(candidates))


class _Config(ctypes.Structure):
    """weft_config_t. The C struct only grows at its end, and weft_config_default fills
    sizeof(weft_config_t) of the library it comes from: the padding keeps a newer library's
    extra fields inside this buffer."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("rank", ctypes.c_int),
        ("nranks", ctypes.c_int),
        ("backend", ctypes.c_int),
        ("registration", ctypes.c_int),
        ("timeout_s", ctypes.c_double),
        ("host_workers", ctypes.c_int),
        ("_reserved", ctypes.c_uint8 * 512),
    ]


# weft_stats_t, in order. Fields are appended only; the buffer below has room for more.
STATS_FIELDS = (
    "registrations_started",
    "registrations_completed",
    "bytes_registered",
    "first_use_waits",
    "first_use_wait_ns",
    "zero_copy_ops",
    "staged_ops",
    "peer_mappings",
    "staging_bytes",
    "inline_ops",
    "remote_store_ops",
    "copy_engine_ops",
    "sm_blocks",
)


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS] + [
        ("_reserved", ctypes.c_uint64 * 64)
    ]


_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_int = ctypes.c_int
_st = ctypes.c_int  # weft_status_t and the other enums

# name: (restype, argtypes)
_PROTOTYPES = {
    "weft_status_string": (ctypes.c_char_p, [_int]),
    "weft_last_error": (ctypes.c_char_p, []),
    "weft_dtype_size": (_sz, [_int]),
    "weft_config_default": (None, [ctypes.POINTER(_Config)]),
    "weft_comm_init": (_st, [ctypes.POINTER(_vp), ctypes.POINTER(_Config)]),
    "weft_comm_destroy": (_st, [_vp]),
    "weft_comm_abort": (_st, [_vp]),
    "weft_comm_rank": (_int, [_vp]),
    "weft_comm_size": (_int, [_vp]),
    "weft_comm_backend": (_int, [_vp]),
    "weft_comm_device": (_int, [_vp]),
    "weft_malloc": (_st, [_vp, ctypes.POINTER(_vp), _sz]),
    "weft_free": (_st, [_vp, _vp]),
    "weft_all_gather": (_st, [_vp, _vp, _vp, _sz, _int, _vp]),
    "weft_reduce_scatter": (_st, [_vp, _vp, _vp, _sz, _int, _int, _vp]),
    "weft_all_reduce": (_st, [_vp, _vp, _vp, _sz, _int, _int, _vp]),
    "weft_broadcast": (_st, [_vp, _vp, _vp, _sz, _int, _int, _vp]),
    "weft_all_to_all": (_st, [_vp, _vp, _vp, _sz, _int, _vp]),
    "weft_all_to_allv": (
        _st,
        [
            _vp,
            _vp,
            ctypes.POINTER(_sz),
            ctypes.POINTER(_sz),
            _vp,
            ctypes.POINTER(_sz),
            ctypes.POINTER(_sz),
            _int,
            _vp,
        ],
    ),
    "weft_barrier": (_st, [_vp, _vp]),
    "weft_moe_dispatch": (
        _st,
        [
            _vp,  # comm
            _vp,  # x
            _sz,  # num_tokens
            _sz,  # hidden
            _int,  # dtype
            _vp,  # topk_idx
            _vp,  # topk_weights
            _int,  # topk
            _int,  # num_experts
            _vp,  # recv_x
            _vp,  # recv_topk_idx
            _vp,  # recv_topk_weights
            _vp,  # recv_expert_counts
            _sz,  # max_recv_tokens
            _vp,  # num_recv_tokens (host or device memory, as the other outputs)
            ctypes.POINTER(_vp),  # handle
            _vp,  # stream
        ],
    ),
    "weft_moe_combine": (_st, [_vp, _vp, _vp, _vp, _vp]),
    "weft_moe_handle_destroy": (_st, [_vp]),
    "weft_get_stats": (_st, [_vp, ctypes.POINTER(_Stats)]),
    "weft_torch_bind": (_st, [_vp]),
}

_lock = threading.Lock()
_library = None


def library():
    """The loaded libweft (ctypes.CDLL) with every prototype set; loaded on first use."""
    global _library
    with _lock:
        if _library is None:
            path = library_path()
            lib = ctypes.CDLL(path)
            for name, (restype, argtypes) in _PROTOTYPES.items():
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    raise OSError(
                        f"weft: {path} does not export {name} (an older libweft?)"
                    ) from None
                fn.restype = restype
                fn.argtypes = argtypes
            _library = lib
        return _library


def status_name(code):
    """The enum name of a weft_status_t value."""
    if 0 <= code < len(STATUS_NAMES):
        return STATUS_NAMES[code]
    return f"WEFT_STATUS_{code}"


def last_error():
    """This thread's weft_last_error() text ('' if none)."""
    text = library().weft_last_error()
    return text.decode("utf-8", "replace") if text else ""


def status_error(status):
    """The WeftError for a non-zero weft_status_t, with this thread's weft_last_error() (read
    now: a later weft call may clear it); None for 0."""
    if status == 0:
        return None
    message = last_error()
    if not message:
        text = library().weft_status_string(status)
        message = text.decode("utf-8", "replace") if text else "unknown status"
    return WeftError(status_name(status), message)


def check(status):
    """Raise WeftError for a non-zero weft_status_t, with this thread's weft_last_error()."""
    error = status_error(status)
    if error is not None:
        raise error
