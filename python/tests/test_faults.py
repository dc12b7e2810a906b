"""Failures and lifetime: abort (also racing destroy), a peer that raises or exits, a destroyed
communicator, and init's keyword overrides (fault_worker.py has the scenarios). The jobs run
with a 60 s weft timeout, and every failure must be seen within 10 s: through the lost
connection, not the timeout."""

import pytest

from conftest import check_case, run_job

SLOW_TIMEOUT = {"WEFT_TIMEOUT_S": "60"}


def fault_job(nranks, scenario):
    return run_job(nranks, [scenario], extra_env=SLOW_TIMEOUT, script="fault_worker.py")


def run_scenario(nranks, scenario):
    """Every rank runs the scenario to its end: weftrun exits 0 and each rank's checks pass."""
    job = fault_job(nranks, scenario)
    assert job.returncode == 0, job.describe()
    check_case(job, scenario)


@pytest.mark.parametrize("nranks", (2, 3))
def test_abort(nranks):
    run_scenario(nranks, "abort")


# raise: an exception inside `with` aborts; destroyed: calls on a destroyed communicator;
# abort_race: abort racing destroy; config: init's keyword overrides; init_fails: the
# constructor failing after the C communicator exists; init_retry: a retry after a refused call;
# abort_during_destroy; destroy_interrupted (fault_worker.py describes each).
@pytest.mark.parametrize("scenario", ("raise", "destroyed", "abort_race", "config", "init_fails",
                                      "init_retry", "abort_during_destroy",
                                      "destroy_interrupted"))
def test_scenario(scenario):
    run_scenario(2, scenario)


def test_peer_exit():
    job = fault_job(2, "exit")
    # weftrun exits with the status of the first rank that failed: rank 1's 3.
    assert job.returncode == 3, job.describe()
    assert job.ranks[1] is None, job.describe()
    job.ranks = job.ranks[:1]
    check_case(job, "exit")
