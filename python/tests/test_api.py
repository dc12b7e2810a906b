"""In-process checks that need no ranks: finding the library and the launcher, WeftError, the
reduction names, the torch allocator entry points' unbound paths, and the package layout."""

import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import weft
from weft import _lib
from weft._comm import _redop

from conftest import REPO_ROOT, worker_env


def test_weft_error_carries_status_and_message():
    err = weft.WeftError("WEFT_ERR_PEER_LOST", "weft_all_reduce: rank 2 closed its connection")
    assert isinstance(err, RuntimeError)
    assert err.status == "WEFT_ERR_PEER_LOST"
    assert err.message == "weft_all_reduce: rank 2 closed its connection"
    assert str(err) == "WEFT_ERR_PEER_LOST: weft_all_reduce: rank 2 closed its connection"


def _header_status_map():
    """(name, text) of every WEFT_STATUS_MAP entry of include/weft.h, in order."""
    with open(os.path.join(REPO_ROOT, "include", "weft.h")) as f:
        header = f.read()
    start = header.index("#define WEFT_STATUS_MAP(X)")
    body = header[start:header.index("typedef enum", start)]
    return re.findall(r'X\((WEFT_\w+),\s*"([^"]*)"\)', body)


def test_status_names_match_the_library():
    """Every status: Python's name is the header's, in enum order, the library's
    weft_status_string is the header's text, and check() raises with that name."""
    entries = _header_status_map()
    assert len(entries) == 11, entries  # weft.h lists 11 statuses
    assert list(_lib.STATUS_NAMES) == [name for name, _ in entries]
    lib = _lib.library()
    for code, (name, text) in enumerate(entries):
        assert _lib.status_name(code) == name
        assert lib.weft_status_string(code).decode() == text, name
        if code == 0:
            _lib.check(code)  # success raises nothing
            continue
        with pytest.raises(weft.WeftError) as info:
            _lib.check(code)
        assert info.value.status == name
    for code in (len(entries), len(entries) + 1, -1):
        assert lib.weft_status_string(code).decode() == "unknown status", code
    assert _lib.status_name(99) == "WEFT_STATUS_99"
    assert _lib.status_name(-1) == "WEFT_STATUS_-1"


def test_dtype_table_matches_the_library():
    from weft import _buffers as B

    sizes = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
             "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
    lib = _lib.library()
    for code, name in enumerate(B.DTYPE_NAMES):
        assert lib.weft_dtype_size(code) == sizes[name], name
    assert lib.weft_dtype_size(len(B.DTYPE_NAMES)) == 0


def test_comm_device_of_the_library():
    """comm.device is what the library says (weft_comm_device): -1 for a NULL communicator, and
    on the host backend, which has no device, None (test_host checks a live one)."""
    assert _lib.library().weft_comm_device(None) == -1


def test_check_raises_with_the_last_error_text():
    lib = _lib.library()
    # weft_comm_destroy(NULL) fails in the library with a message naming call and argument.
    with pytest.raises(weft.WeftError) as info:
        _lib.check(lib.weft_comm_destroy(None))
    assert info.value.status == "WEFT_ERR_INVALID_ARGUMENT"
    assert info.value.message == "weft_comm_destroy: comm is NULL"


@pytest.mark.parametrize("op, code", [
    ("sum", 0), ("SUM", 0), ("prod", 1), ("product", 1), ("max", 2), ("min", 3), ("avg", 4),
    (weft.ReduceOp.MIN, 3), (type("RedOpType", (), {"name": "PRODUCT"})(), 1),
])
def test_reduction_names(op, code):
    assert _redop("t", op) == code


@pytest.mark.parametrize("op", ["xor", "band", 7, None])
def test_unknown_reductions(op):
    with pytest.raises(ValueError, match="is not one of"):
        _redop("t", op)


def test_library_path_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WEFT_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(OSError, match="is not a file"):
        _lib.library_path()


def test_library_not_found_names_both_places(monkeypatch):
    monkeypatch.delenv("WEFT_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "_BUNDLED_LIBRARY", "/nonexistent/libweft.so")
    with pytest.raises(OSError, match="WEFT_LIBRARY.*pip install ./python"):
        _lib.library_path()


def test_launcher_is_found():
    path = weft.launcher_path()
    assert os.access(path, os.X_OK)
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "weftrun" in out.stdout + out.stderr


def test_launcher_command_runs_a_job(tmp_path):
    """python -m weft._launcher is what the installed `weftrun` command runs."""
    script = tmp_path / "hello.py"
    script.write_text(
        "import sys, numpy as np, weft\n"
        "with weft.init() as c:\n"
        "    a = np.array([c.rank + 1.0])\n"
        "    c.all_reduce(a)\n"
        "    sys.stdout.write(f'rank {c.rank} of {c.size}: {a[0]}\\n')  # one write per line\n"
    )
    out = subprocess.run([sys.executable, "-m", "weft._launcher", "-n", "3", sys.executable,
                          str(script)], env=worker_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == [f"rank {r} of 3: 6.0" for r in range(3)]


def test_torch_allocator_entry_points_unbound():
    """The C functions PyTorch's CUDAPluggableAllocator calls, with no communicator bound."""
    lib = _lib.library()
    alloc = lib.weft_torch_alloc
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int,
                                                      ctypes.c_void_p]
    free = lib.weft_torch_free
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                         ctypes.c_void_p]
    assert lib.weft_torch_bind(None) == 0
    assert alloc(1 << 20, 0, None) is None
    assert "no communicator is bound" in _lib.last_error()
    free(None, 0, 0, None)  # no-op
    free(ctypes.c_void_p(0x1000), 4096, 0, None)  # handed out by no weft_torch_alloc
    assert "did not come from weft_torch_alloc" in _lib.last_error()


def test_public_header_compiles_alone():
    """include/weft_torch.h compiles alone as C11 and C++11 (as weft.h does)."""
    src = "#include <weft_torch.h>\nint main(void) { return weft_torch_bind(0) ? 1 : 0; }\n"
    include = os.path.join(REPO_ROOT, "include")
    for cmd in (["cc", "-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror", "-x", "c"],
                ["c++", "-std=c++11", "-pedantic", "-Wall", "-Wextra", "-Werror", "-x", "c++"]):
        if not any(os.access(os.path.join(d, cmd[0]), os.X_OK)
                   for d in os.environ.get("PATH", "").split(os.pathsep)):
            pytest.skip(f"{cmd[0]} not found")
        out = subprocess.run(cmd + ["-I", include, "-fsyntax-only", "-"], input=src,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr


def test_numpy_is_the_only_dependency():
    """import weft must not import torch (it is optional)."""
    code = "import sys, weft, weft.torch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=worker_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert np.dtype(np.float32).itemsize == 4
