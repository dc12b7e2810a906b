"""Build step of the weft package: compile libweft and the weftrun launcher from the source tree
with CMake, and bundle both in the package (weft/libweft.so, weft/weftrun).

The source tree is this directory's parent (``pip install ./python`` builds in place), or the
directory named by WEFT_SOURCE_DIR. Extra CMake arguments come from WEFT_CMAKE_ARGS (for
example ``-DWEFT_CUDA=OFF``); by default the CUDA backend is built where nvcc exists, as in any
weft build. Only CMake and a C compiler are needed: nothing is downloaded.

The wheel holds a compiled library, so it is marked platform-specific.
"""

import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def _source_dir():
    src = os.path.abspath(os.environ.get("WEFT_SOURCE_DIR") or os.path.dirname(HERE))
    for path in ("CMakeLists.txt", os.path.join("include", "weft.h")):
        if not os.path.isfile(os.path.join(src, path)):
            raise SystemExit(
                f"weft: {src} is not the weft source tree (no {path}); build from a checkout "
                "with `pip install ./python`, or set WEFT_SOURCE_DIR"
            )
    return src


def _run(cmd):
    print("weft: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)


class BuildWithLibrary(build_py):
    """build_py, then CMake: libweft.so and weftrun land next to the package's modules."""

    def run(self):
        super().run()
        if shutil.which("cmake") is None:
            raise SystemExit("weft: building the package needs CMake (3.20 or newer) on PATH")
        cmake_dir = os.path.join(self.get_finalized_command("build").build_temp, "weft-cmake")
        _run(
            ["cmake", "-S", _source_dir(), "-B", cmake_dir, "-DWEFT_BUILD_TESTS=OFF"]
            + shlex.split(os.environ.get("WEFT_CMAKE_ARGS", ""))
        )
        jobs = str(os.cpu_count() or 1)
        _run(["cmake", "--build", cmake_dir, "--target", "weft", "weftrun", "-j", jobs])
        if getattr(self, "editable_mode", False):
            dest = os.path.join(HERE, "weft")
        else:
            dest = os.path.join(self.build_lib, "weft")
        os.makedirs(dest, exist_ok=True)
        # libweft.so is a symbolic link to the versioned file: copy the file itself.
        shutil.copyfile(os.path.join(cmake_dir, "libweft.so"), os.path.join(dest, "libweft.so"))
        shutil.copy2(os.path.join(cmake_dir, "weftrun"), os.path.join(dest, "weftrun"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
