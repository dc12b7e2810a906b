"""Every collective, dtype and reduction on the host backend, with numpy arrays, on 1 to 4
ranks (one weftrun job per rank count runs every case; each case is one test here)."""

import pytest

from conftest import SEED, check_case, run_job
from worker import case_names

RANKS = (1, 2, 3, 4)
_jobs = {}


def job(nranks):
    if nranks not in _jobs:
        _jobs[nranks] = run_job(nranks, ["--kind", "numpy", "--seed", SEED])
    return _jobs[nranks]


def test_jobs_exit_cleanly():
    for n in RANKS:
        j = job(n)
        assert j.returncode == 0, j.describe()


@pytest.mark.parametrize("nranks", RANKS)
@pytest.mark.parametrize("case", case_names("numpy"))
def test_case(case, nranks):
    check_case(job(nranks), case)
