"""The collectives on CUDA tensors (CUDA backend), on the GPU machine: PyTorch's own memory
(staged path), a weft.torch.mem_pool (zero-copy), the process-wide weft allocator; CUDA-graph
capture and replay, the current stream, first-use waits, device and backend errors
(cases_gpu.py). Several ranks share the GPUs (run_gpu.sh starts MPS for that).

Skipped, with the reason shown by `pytest -rs`, without PyTorch or a CUDA device; with
WEFT_REQUIRE_GPU=1 (run_gpu.sh sets it) that reason is a failure instead, so that the GPU step
cannot pass with no GPU test run. Rank counts come from WEFT_GPU_TEST_RANKS (default "2 4").
"""

import importlib
import os

import pytest


def _no_gpu(reason):
    """Skip this module, or fail it when the GPU tests are required (WEFT_REQUIRE_GPU=1)."""
    if os.environ.get("WEFT_REQUIRE_GPU") == "1":
        pytest.fail(f"{reason}, and WEFT_REQUIRE_GPU=1 requires the GPU tests", pytrace=False)
    pytest.skip(f"{reason}: GPU tests skipped", allow_module_level=True)


try:
    import torch
except ImportError:
    torch = None
if torch is None:
    _no_gpu("PyTorch is not installed")
if not torch.cuda.is_available():
    _no_gpu("no CUDA device visible to PyTorch")

from conftest import SEED, check_case, run_job  # noqa: E402
from worker import case_names  # noqa: E402

importlib.import_module("cases_gpu")  # registers the GPU cases

RANKS = tuple(int(n) for n in os.environ.get("WEFT_GPU_TEST_RANKS", "2 4").split())
KINDS = ("torch-cuda", "torch-cuda-pool", "torch-cuda-global")
GPU_ENV = {"WEFT_BACKEND": "cuda", "NCCL_NVLS_ENABLE": "0", "WEFT_TIMEOUT_S": "60"}
_jobs = {}


def job(kind, nranks):
    key = (kind, nranks)
    if key not in _jobs:
        env = dict(GPU_ENV)
        if kind == "torch-cuda-hostcomm":
            env["WEFT_BACKEND"] = "host"
        _jobs[key] = run_job(nranks, ["--kind", kind, "--seed", SEED], extra_env=env,
                             timeout=300)
    return _jobs[key]


@pytest.mark.parametrize("nranks", RANKS)
@pytest.mark.parametrize("kind, case", [(k, c) for k in KINDS for c in case_names(k)])
def test_case(kind, case, nranks):
    check_case(job(kind, nranks), case)


@pytest.mark.parametrize("case", case_names("torch-cuda-hostcomm"))
def test_cuda_tensors_on_host_backend(case):
    check_case(job("torch-cuda-hostcomm", 2), case)
