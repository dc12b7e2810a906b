"""examples/tp_mlp.py on CPU tensors (host backend) with 2 and 4 ranks: every rank must print
its PASS line. Skipped, with the reason shown by `pytest -rs`, without PyTorch; the GPU runs
are in run_gpu.sh."""

import os
import subprocess
import sys

import pytest

import weft
from conftest import REPO_ROOT, worker_env

pytest.importorskip("torch", reason="PyTorch is not installed: examples/tp_mlp.py not run")


@pytest.mark.parametrize("nranks", (2, 4))
def test_tp_mlp_cpu(nranks):
    cmd = [weft.launcher_path(), "-n", str(nranks), sys.executable,
           os.path.join(REPO_ROOT, "examples", "tp_mlp.py"), "--iters", "2", "--tokens", "16",
           "--hidden", "64", "--ffn", "256"]
    out = subprocess.run(cmd, env=worker_env({"WEFT_BACKEND": "host"}),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout
    passes = [line for line in out.stdout.splitlines() if line.startswith("PASS tp_mlp rank=")]
    assert len(passes) == nranks, out.stdout
