"""Failures and lifetime: abort (also racing destroy), a peer that raises or exits, a destroyed
communicator, and init's keyword overrides (fault_worker.py has the scenarios). The jobs run
with a 60 s weft timeout, and every failure must be seen within 10 s: through the lost
connection, not the timeout."""

import pytest

from conftest import check_case, run_job

SLOW_TIMEOUT = {"WEFT_TIMEOUT_S": "60"}


def fault_job(nranks, scenario):
    return run_job(nranks, [scenario], extra_env=SLOW_TIMEOUT, script="fault_worker.py")


@pytest.mark.parametrize("nranks", (2, 3))
def test_abort(nranks):
    job = fault_job(nranks, "abort")
    assert job.returncode == 0, job.describe()
    check_case(job, "abort")


def test_exception_inside_with_aborts():
    job = fault_job(2, "raise")
    assert job.returncode == 0, job.describe()
    check_case(job, "raise")


def test_peer_exit():
    job = fault_job(2, "exit")
    # weftrun exits with the status of the first rank that failed: rank 1's 3.
    assert job.returncode == 3, job.describe()
    assert job.ranks[1] is None, job.describe()
    job.ranks = job.ranks[:1]
    check_case(job, "exit")


def test_destroyed_communicator():
    job = fault_job(2, "destroyed")
    assert job.returncode == 0, job.describe()
    check_case(job, "destroyed")


def test_abort_racing_destroy():
    job = fault_job(2, "abort_race")
    assert job.returncode == 0, job.describe()
    check_case(job, "abort_race")


def test_init_overrides():
    job = fault_job(2, "config")
    assert job.returncode == 0, job.describe()
    check_case(job, "config")


def test_init_fails_after_the_c_communicator():
    job = fault_job(2, "init_fails")
    assert job.returncode == 0, job.describe()
    check_case(job, "init_fails")


def test_init_retry_after_a_refused_call():
    job = fault_job(2, "init_retry")
    assert job.returncode == 0, job.describe()
    check_case(job, "init_retry")


def test_abort_during_destroy():
    job = fault_job(2, "abort_during_destroy")
    assert job.returncode == 0, job.describe()
    check_case(job, "abort_during_destroy")
