"""The collectives on CPU tensors (host backend), bfloat16 included. Skipped, with the reason
shown by `pytest -rs`, where PyTorch is not installed (CI does not install it)."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: CPU-tensor tests skipped")

from conftest import SEED, check_case, run_job  # noqa: E402
from worker import case_names  # noqa: E402

RANKS = (2, 3)
_jobs = {}


def job(nranks):
    if nranks not in _jobs:
        _jobs[nranks] = run_job(nranks, ["--kind", "torch-cpu", "--seed", SEED])
    return _jobs[nranks]


@pytest.mark.parametrize("nranks", RANKS)
@pytest.mark.parametrize("case", case_names("torch-cpu"))
def test_case(case, nranks):
    check_case(job(nranks), case)
