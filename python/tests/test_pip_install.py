"""`pip install` of the package into a fresh virtual environment: the build compiles libweft and
weftrun with CMake and bundles them, and the installed package then runs a 3-rank job on its
own (no WEFT_LIBRARY, its own `weftrun` command). Needs the package registry (for setuptools
and numpy) and about half a minute, so it runs only with WEFT_TEST_PIP_INSTALL=1 (`make
test-python` sets it). The library is built without CUDA here to save time
(WEFT_CMAKE_ARGS=-DWEFT_CUDA=OFF); run_gpu.sh checks the CUDA build."""

import os
import shutil
import subprocess
import venv

import pytest

from conftest import REPO_ROOT, SOURCE_PACKAGE_ROOT

pytestmark = pytest.mark.skipif(
    os.environ.get("WEFT_TEST_PIP_INSTALL") != "1",
    reason="set WEFT_TEST_PIP_INSTALL=1 to build and install the package in a fresh venv",
)

JOB = """
import sys, numpy as np, weft
with weft.init() as comm:
    a = comm.empty(1000, np.int64)
    a[:] = comm.rank + 1
    comm.all_reduce(a)
    assert (a == comm.size * (comm.size + 1) // 2).all(), a[:4]
    sys.stdout.write(f"PASS rank {comm.rank} {weft.library_path()}\\n")
"""


def test_pip_install_in_a_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    # A copy of python/ without build leftovers; WEFT_SOURCE_DIR names the C source tree.
    src = tmp_path / "python"
    shutil.copytree(SOURCE_PACKAGE_ROOT, src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                  ".pytest_cache", "libweft.so", "weftrun"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("WEFT_LIBRARY", "WEFT_WEFTRUN", "PYTHONPATH")}
    env.update(WEFT_SOURCE_DIR=REPO_ROOT, WEFT_CMAKE_ARGS="-DWEFT_CUDA=OFF",
               WEFT_BACKEND="host")
    out = subprocess.run([python, "-m", "pip", "install", "-q", str(src)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-4000:]
    site = subprocess.run([python, "-c", "import weft, os; print(os.path.dirname("
                                         "weft.__file__))"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    pkg = site.stdout.strip()
    assert pkg.startswith(str(env_dir)), pkg
    assert os.path.isfile(os.path.join(pkg, "libweft.so"))
    assert os.access(os.path.join(pkg, "weftrun"), os.X_OK)
    job = subprocess.run([str(env_dir / "bin" / "weftrun"), "-n", "3", python, "-c", JOB],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=120, cwd=tmp_path)
    assert job.returncode == 0, job.stdout
    lines = sorted(line for line in job.stdout.splitlines() if line.startswith("PASS"))
    assert lines == [f"PASS rank {r} {pkg}/libweft.so" for r in range(3)], job.stdout
